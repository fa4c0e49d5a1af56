// Package e2e runs the whole task server as separate processes — every
// daemon, two transitioner replicas with --mod 2, and simulated volunteers of
// which some fail, vanish or cheat — and checks that every job ends right.
package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/localproject"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// buildPrograms compiles every command into a temporary directory.
func buildPrograms(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", dir+"/", "./cmd/...")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	return dir
}

func TestPipelineEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildPrograms(t)

	var b [4]byte
	_, _ = rand.Read(b[:])
	dbName := "tse2e_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { dropDatabase(t, dbName) })

	const jobs = 500
	projectDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	sum, err := localproject.Run(ctx, localproject.Options{
		BinDir:      bin,
		ServerDSN:   storetest.ServerDSN(),
		Database:    dbName,
		Fresh:       true,
		ProjectDir:  projectDir,
		ShmPath:     filepath.Join("/dev/shm", "taskserver-"+dbName),
		Jobs:        jobs,
		UntilDone:   true,
		Timeout:     10 * time.Minute,
		Hosts:       60,
		Users:       12,
		FailFrac:    0.05,
		VanishFrac:  0.05,
		CheatFrac:   0.1,
		DelayBound:  15 * time.Second,
		ComputeTime: 100 * time.Millisecond,
		Out:         testWriter{t},
	})
	t.Logf("summary:\n%s", sum)
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join("/dev/shm", "taskserver-"+dbName))
		_ = os.Remove(filepath.Join("/dev/shm", "taskserver-"+dbName+".lock"))
	})
	if err != nil {
		dumpLogs(t, filepath.Join(projectDir, "logs"))
		t.Fatalf("localproject.Run: %v", err)
	}
	if !sum.OK() {
		t.Errorf("invariants broke: %v", sum.Violations)
	}
	if sum.JobsCreated != jobs {
		t.Errorf("jobs created = %d, want %d", sum.JobsCreated, jobs)
	}
	if got := sum.JobsAssimilated + sum.JobsErrored; got != jobs {
		t.Errorf("jobs assimilated (%d) + errored (%d) = %d, want every one of %d exactly once", sum.JobsAssimilated, sum.JobsErrored, got, jobs)
	}
	if sum.JobsPurged != jobs || sum.JobsUnfinished != 0 {
		t.Errorf("jobs purged = %d, unfinished = %d; want %d purged, 0 unfinished", sum.JobsPurged, sum.JobsUnfinished, jobs)
	}
	if sum.FilesLeft != 0 {
		t.Errorf("%d input/output files left in download/upload, want 0", sum.FilesLeft)
	}
	if sum.Invalid == 0 {
		t.Errorf("no result was judged invalid although 10%% of hosts cheat: the validator is not comparing")
	}
	if sum.JobsErrored > jobs/10 {
		t.Errorf("%d of %d jobs errored: far more than failing hosts explain", sum.JobsErrored, jobs)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

func dropDatabase(t *testing.T, name string) {
	cfg, err := mysql.ParseDSN(storetest.ServerDSN())
	if err != nil {
		t.Errorf("parse DSN: %v", err)
		return
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Errorf("open server: %v", err)
		return
	}
	defer db.Close()
	if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}

func dumpLogs(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("---- %s (tail)\n%s", filepath.Base(f), b)
	}
}
