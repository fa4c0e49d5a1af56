// Package localproject sets up and runs a complete local project: a
// database with the schema and a demo app, users and keys, every daemon as
// its own process (two transitioner replicas with --mod 2) and the simulated
// volunteers. It then reports what flowed through and checks the invariants
// the task server promises. `make run` and the end-to-end test both use it.
package localproject

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/store"
)

// Options configures a local project run.
type Options struct {
	BinDir     string        // directory holding the built programs
	ServerDSN  string        // database server, no database name: root@tcp(127.0.0.1:3306)/
	Database   string        // database name; created (dropped first if Fresh)
	Fresh      bool          // start from an empty database and project directory
	ProjectDir string        // project directory (download, upload, results, archives, logs)
	ShmPath    string        // shared-memory cache file; default config.DefaultShmPath(ProjectDir)
	Duration   time.Duration // stop after this long; 0 = until ctx ends (or until done with Jobs)
	Jobs       int           // total jobs to create; 0 = keep a backlog forever
	UntilDone  bool          // with Jobs: stop as soon as every job is assimilated and purged
	Timeout    time.Duration // with UntilDone: give up after this long
	Hosts      int
	Users      int
	FailFrac   float64
	VanishFrac float64
	CheatFrac  float64
	// TrickleFrac is the share of tasks whose app sends a trickle-up;
	// the trickle handler extends their deadlines.
	TrickleFrac float64
	// DelayBound is each job's deadline; short in tests so that vanished
	// hosts' instances time out and are replaced within the run.
	DelayBound    time.Duration
	ComputeTime   time.Duration
	UnsentTarget  int
	ProgressEvery time.Duration
	Out           io.Writer // progress lines and the summary
	Log           *slog.Logger
}

func (o *Options) defaults() {
	if o.ProjectDir == "" {
		o.ProjectDir = "project"
	}
	if o.Database == "" {
		o.Database = "taskserver_local"
	}
	if o.Hosts <= 0 {
		o.Hosts = 40
	}
	if o.Users <= 0 {
		o.Users = 10
	}
	if o.DelayBound <= 0 {
		o.DelayBound = 30 * time.Second
	}
	if o.ComputeTime <= 0 {
		o.ComputeTime = time.Second
	}
	if o.UnsentTarget <= 0 {
		o.UnsentTarget = 100
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// project is the state of one run.
type project struct {
	opts       Options
	dsn        string
	configPath string
	authPath   string
	schedURL   string
	st         *store.Store
}

// Setup prepares the database and the project directory and returns the DSN
// of the project database.
func setup(ctx context.Context, o Options) (*project, error) {
	cfg, err := mysql.ParseDSN(o.ServerDSN)
	if err != nil {
		return nil, fmt.Errorf("parse server DSN: %w", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open database server: %w", err)
	}
	defer admin.Close()
	if o.Fresh {
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+o.Database+"`"); err != nil {
			return nil, fmt.Errorf("drop database %s: %w", o.Database, err)
		}
		if err := os.RemoveAll(o.ProjectDir); err != nil {
			return nil, fmt.Errorf("clear project directory: %w", err)
		}
		_ = os.Remove(o.ShmPath)
	}
	if _, err := admin.ExecContext(ctx, schema.CreateDatabase(o.Database)); err != nil {
		return nil, fmt.Errorf("create database %s: %w", o.Database, err)
	}
	cfg.DBName = o.Database
	p := &project{opts: o, dsn: cfg.FormatDSN()}
	p.st, err = store.Open(ctx, p.dsn, store.Options{MaxOpenConns: 4})
	if err != nil {
		return nil, err
	}
	if _, err := p.st.SchemaApply(ctx, time.Now()); err != nil {
		return nil, err
	}
	for _, d := range []string{"download", "upload", "results", "archives", "logs", "keys"} {
		if err := os.MkdirAll(filepath.Join(o.ProjectDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("make project directory: %w", err)
		}
	}
	if err := p.seed(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// seed adds the demo platform, app, app version, users and keys once.
func (p *project) seed(ctx context.Context) error {
	apps, err := p.st.AppList(ctx)
	if err != nil {
		return err
	}
	if len(apps) == 0 {
		aid, err := projectrun.SeedDemoApp(ctx, p.st)
		if err != nil {
			return err
		}
		if err := projectrun.SeedHardwareVersions(ctx, p.st, aid); err != nil {
			return err
		}
	}
	p.authPath = filepath.Join(p.opts.ProjectDir, "authenticators.txt")
	if _, err := os.Stat(p.authPath); errors.Is(err, os.ErrNotExist) {
		lines, err := projectrun.SeedUsers(ctx, p.st, p.opts.Users, "volunteer")
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.authPath, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return fmt.Errorf("write authenticators: %w", err)
		}
	}
	// Plan classes for multi-threaded, NVIDIA and AMD versions: the
	// scheduler and taskctl app-version add read them from the project
	// directory. An operator's edits are kept.
	if err := projectrun.WritePlanClassSpec(p.opts.ProjectDir); err != nil {
		return err
	}
	priv := filepath.Join(p.opts.ProjectDir, "keys", "upload_private")
	if _, err := os.Stat(priv); errors.Is(err, os.ErrNotExist) {
		k, err := keys.Generate()
		if err != nil {
			return err
		}
		if err := keys.WritePrivateFile(priv, k); err != nil {
			return err
		}
		if err := keys.WritePublicFile(filepath.Join(p.opts.ProjectDir, "keys", "upload_public"), &k.PublicKey); err != nil {
			return err
		}
	}
	// The scheduler signs upload certificates with the Ed25519 key: a
	// small fraction of the RSA key's CPU per task sent.
	edPriv := filepath.Join(p.opts.ProjectDir, "keys", keys.Ed25519PrivateFile)
	if _, err := os.Stat(edPriv); errors.Is(err, os.ErrNotExist) {
		k, err := keys.GenerateEd25519()
		if err != nil {
			return err
		}
		if err := keys.WriteEd25519PrivateFile(edPriv, k); err != nil {
			return err
		}
		if err := keys.WriteEd25519PublicFile(filepath.Join(p.opts.ProjectDir, "keys", keys.Ed25519PublicFile), k.Public().(ed25519.PublicKey)); err != nil {
			return err
		}
	}
	return nil
}
