package paperbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/store"
)

// project is the benchmark's project: its directory, database and config.
type project struct {
	dir        string
	dsn        string
	configPath string
	shmPath    string
	appID      int64
	auths      []string
}

// setupProject applies the schema to the (empty) database at dsn and adds
// the demo app with one platform and app version, the volunteer accounts and
// the upload keys; it writes the config file every program reads (no
// url-base: the scheduler starts on port 0 and makes it of its address).
func setupProject(ctx context.Context, dir, dsn string, users int) (*project, error) {
	// A used directory would carry the work generator's counter file, and
	// with it the jobs of an earlier run into --total-jobs.
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("project directory %s is not empty", dir)
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	now := time.Now()
	if _, err := st.SchemaApply(ctx, now); err != nil {
		return nil, err
	}
	for _, d := range []string{"download", "upload", "results", "archives", "logs", "keys"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("make project directory: %w", err)
		}
	}
	shmPath, err := config.DefaultShmPath(dir)
	if err != nil {
		return nil, err
	}
	p := &project{dir: dir, dsn: dsn, configPath: filepath.Join(dir, "project.yaml"), shmPath: shmPath}
	if p.appID, err = projectrun.SeedDemoApp(ctx, st); err != nil {
		return nil, err
	}
	// The hardware versions (multi-threaded, NVIDIA, AMD) put plan-class
	// selection on the dispatch path; the benchmark's one-CPU hosts without
	// GPUs pass none of their classes, so they run what the paper's did.
	if err := projectrun.SeedHardwareVersions(ctx, st, p.appID); err != nil {
		return nil, err
	}
	if err := projectrun.WritePlanClassSpec(dir); err != nil {
		return nil, err
	}
	if p.auths, err = projectrun.SeedUsers(ctx, st, users, "bench"); err != nil {
		return nil, err
	}
	k, err := keys.Generate()
	if err != nil {
		return nil, err
	}
	if err := keys.WritePrivateFile(filepath.Join(dir, "keys", "upload_private"), k); err != nil {
		return nil, err
	}
	if err := keys.WritePublicFile(filepath.Join(dir, "keys", "upload_public"), &k.PublicKey); err != nil {
		return nil, err
	}
	// A new project signs upload certificates with Ed25519 (taskctl keys
	// generate makes the pair); the scheduler picks the key up by its
	// default path.
	ek, err := keys.GenerateEd25519()
	if err != nil {
		return nil, err
	}
	if err := keys.WriteEd25519PrivateFile(filepath.Join(dir, "keys", keys.Ed25519PrivateFile), ek); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`# Benchmark project configuration, shared by every program (keys are flag names).
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: info
app: %s
# The benchmark's one-CPU hosts each take hundreds of instances in minutes,
# far past any real host's day: a quota that never binds keeps the daily
# quota's check and bookkeeping on the dispatch path without refusing.
daily-result-quota: 100000000
`, dsn, dir, p.shmPath, demoapp.AppName)
	if err := os.WriteFile(p.configPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("write project config: %w", err)
	}
	return p, nil
}

// removeShm removes the shared-memory cache the feeder made.
func (p *project) removeShm() {
	_ = os.Remove(p.shmPath)
	_ = os.Remove(p.shmPath + ".lock")
}
