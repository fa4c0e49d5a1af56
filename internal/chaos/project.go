package chaos

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/privatedb"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/store"
)

// database is the project database's name on the private server.
const database = "taskserver_chaos"

// uploadDiskSize is the tmpfs put under the upload folder: room for every
// output of a run, small enough to fill in a moment.
const uploadDiskSize = "128m"

// project is the state of one chaos run.
type project struct {
	opts Options
	dir  string // the project directory, under OutDir
	db   *privatedb.Server
	dsn  string
	st   *store.Store
	// schedAddr is the scheduler's address, port 0 until its first start
	// reports the port it got; it starts again there after a kill, where
	// the hosts look for it. urlBase is "http://" and schedAddr.
	schedAddr  string
	urlBase    string
	shmPath    string
	configPath string
	authPath   string
	handledLog string
	ackLogs    []string
	// uploadMount is the tmpfs mounted on the upload folder, "" when the
	// mount failed (not root, no permission) and diskFullSkip says why.
	uploadMount  string
	diskFullSkip string
	daemons      []*projectrun.Proc
	sims         []*projectrun.Proc

	// What differs between a chaos run and a load run, set before the
	// programs start: the work generator's --total-jobs (0: no end) and
	// --unsent-target, and extra arguments of the scheduler and the hosts.
	totalJobs    int
	unsentTarget int
	schedArgs    []string
	simArgs      []string
	// noDBRestart keeps the database server up: a cluster run's
	// single-server baseline measures the server's CPU, which a restart
	// would split over two processes.
	noDBRestart bool
}

// setup starts the private database, applies the schema, seeds the app,
// users and keys, and writes the configuration every program reads.
func setup(ctx context.Context, o Options) (*project, error) {
	p, err := newProject(o)
	if err != nil {
		return nil, err
	}
	p.db, err = privatedb.Start(ctx, filepath.Join(p.dir, "db"), privatedb.Options{BufferPool: "256M", MaxConnections: 300})
	if err != nil {
		return nil, fmt.Errorf("start private database: %w", err)
	}
	return p, p.createSchema(ctx, p.db.DSN(), nil)
}

// newProject clears and makes the project's folders under OutDir.
func newProject(o Options) (*project, error) {
	out, err := filepath.Abs(o.OutDir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(out, "project")
	shmPath, err := config.DefaultShmPath(dir)
	if err != nil {
		return nil, err
	}
	p := &project{opts: o, dir: dir, shmPath: shmPath, totalJobs: o.Jobs, unsentTarget: 200, schedAddr: anyPort}
	if err := os.RemoveAll(p.dir); err != nil {
		return nil, fmt.Errorf("clear project directory: %w", err)
	}
	for _, d := range []string{"download", "upload", "archives", "logs", "keys", "db"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("make project directory: %w", err)
		}
	}
	p.handledLog = filepath.Join(out, "handled.log")
	_ = os.Remove(p.handledLog)
	return p, nil
}

// createSchema creates the project database on the server at serverDSN
// (no database name), applies the schema, seeds the app, users and keys.
// The harness's own connection (p.st, p.dsn) gets params too: on a
// cluster, wsrep_sync_wait makes its reads wait for every write the
// cluster committed before them.
func (p *project) createSchema(ctx context.Context, serverDSN string, params map[string]string) error {
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return err
	}
	admin, err := store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 1})
	if err != nil {
		return err
	}
	_, err = admin.DB().ExecContext(ctx, schema.CreateDatabase(database))
	admin.Close()
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	cfg.DBName = database
	p.dsn = cfg.FormatDSN()
	if len(params) > 0 {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		for k, v := range params {
			cfg.Params[k] = v
		}
	}
	if p.st, err = store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 4}); err != nil {
		return err
	}
	if _, err := p.st.SchemaApply(ctx, time.Now()); err != nil {
		return err
	}
	if err := p.seed(ctx); err != nil {
		return err
	}
	p.configPath = filepath.Join(p.dir, "project.yaml")
	return nil
}

// writeConfig writes the configuration every program reads, with dsn as
// the database they reach: the server itself, or a proxy in front of it.
// It names no url-base: the scheduler makes it of the address it got.
func (p *project) writeConfig(dsn string) error {
	conf := fmt.Sprintf(`# Chaos run configuration, shared by every program (keys are flag names).
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: info
app: demo
`, dsn, p.dir, p.shmPath)
	if err := os.WriteFile(p.configPath, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("write project config: %w", err)
	}
	return nil
}

// close releases what setup made once every program has stopped.
func (p *project) close() {
	if p.st != nil {
		p.st.Close()
	}
	if p.db != nil {
		p.db.Stop()
	}
	_ = p.unmountUpload()
	_ = os.Remove(p.shmPath)
	_ = os.Remove(p.shmPath + ".lock") // the feeder's lock file beside it
}

// seed adds the demo platform, app and version, the users (their
// authenticators in a file for the hosts) and the upload keys.
func (p *project) seed(ctx context.Context) error {
	aid, err := projectrun.SeedDemoApp(ctx, p.st)
	if err != nil {
		return err
	}
	// Multi-threaded and GPU versions, for the multi-core and GPU hosts.
	if err := projectrun.SeedHardwareVersions(ctx, p.st, aid); err != nil {
		return err
	}
	if err := projectrun.WritePlanClassSpec(p.dir); err != nil {
		return err
	}
	auths, err := projectrun.SeedUsers(ctx, p.st, p.opts.Users, "volunteer")
	if err != nil {
		return err
	}
	p.authPath = filepath.Join(p.dir, "authenticators.txt")
	if err := os.WriteFile(p.authPath, []byte(strings.Join(auths, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("write authenticators: %w", err)
	}
	k, err := keys.Generate()
	if err != nil {
		return err
	}
	if err := keys.WritePrivateFile(filepath.Join(p.dir, "keys", "upload_private"), k); err != nil {
		return err
	}
	if err := keys.WritePublicFile(filepath.Join(p.dir, "keys", "upload_public"), &k.PublicKey); err != nil {
		return err
	}
	ek, err := keys.GenerateEd25519()
	if err != nil {
		return err
	}
	if err := keys.WriteEd25519PrivateFile(filepath.Join(p.dir, "keys", keys.Ed25519PrivateFile), ek); err != nil {
		return err
	}
	return keys.WriteEd25519PublicFile(filepath.Join(p.dir, "keys", keys.Ed25519PublicFile), ek.Public().(ed25519.PublicKey))
}

// mountUpload puts the upload folder on a small tmpfs of its own, so that
// the disk-full fault fills that disk and no other. Without the right to
// mount, the fault is skipped and the report says why.
func (p *project) mountUpload(ctx context.Context) {
	dir := filepath.Join(p.dir, "upload")
	if os.Geteuid() != 0 {
		p.diskFullSkip = "not root: cannot mount a tmpfs on the upload folder"
		return
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", "size="+uploadDiskSize+",mode=0755", "tmpfs", dir).CombinedOutput()
	if err != nil {
		p.diskFullSkip = fmt.Sprintf("mount tmpfs on the upload folder: %v: %s", err, strings.TrimSpace(string(out)))
		return
	}
	p.uploadMount = dir
}

// unmountUpload removes the tmpfs; its files were counted before.
func (p *project) unmountUpload() error {
	if p.uploadMount == "" {
		return nil
	}
	if out, err := exec.Command("umount", p.uploadMount).CombinedOutput(); err != nil {
		return fmt.Errorf("umount %s: %v: %s", p.uploadMount, err, strings.TrimSpace(string(out)))
	}
	p.uploadMount = ""
	return nil
}

// anyPort has a daemon listen on a port of the kernel's choice, which it
// reports (--addr-file).
const anyPort = "127.0.0.1:0"

// programs describes every daemon, in start order.
func (p *project) programs() []*projectrun.Proc {
	bin := func(n string) string { return filepath.Join(p.opts.BinDir, n) }
	logs := filepath.Join(p.dir, "logs")
	daemon := func(name, program string, args ...string) *projectrun.Proc {
		return projectrun.New(projectrun.Spec{Name: name, Bin: bin(program), LogDir: logs, ReportsAddrs: true,
			Args: append([]string{"--config", p.configPath, "--listen", anyPort}, args...)})
	}
	handler := strings.Join([]string{bin("chaos"), "record", "--log", p.handledLog}, " ")
	return []*projectrun.Proc{
		daemon("feeder", "feeder", "--sleep", "200ms"),
		daemon("scheduler", "scheduler", p.schedulerArgs()...),
		daemon("transitioner.0", "transitioner", "--mod", "2", "--mod-index", "0", "--sleep", "500ms"),
		daemon("transitioner.1", "transitioner", "--mod", "2", "--mod-index", "1", "--sleep", "500ms"),
		daemon("validator", "validator", "--sleep", "500ms"),
		daemon("assimilator", "assimilator", "--sleep", "500ms", "--handler", "command",
			"--handler-cmd", handler, "--handler-timeout", "1m"),
		daemon("file_deleter", "file_deleter", "--sleep", "500ms"),
		daemon("db_purge", "db_purge", "--sleep", "1s", "--archive-dir", "archives"),
		daemon("work_generator", "work_generator", "--sleep", "500ms",
			"--unsent-target", strconv.Itoa(p.unsentTarget), "--total-jobs", strconv.Itoa(p.totalJobs),
			"--delay-bound", p.opts.DelayBound.String(), "--min-quorum", "2", "--target-nresults", "2", "--rsc-fpops-est", "1e10"),
	}
}

// schedulerArgs are the scheduler's own arguments, on schedAddr.
func (p *project) schedulerArgs() []string {
	return append([]string{"--addr", p.schedAddr, "--url-base", p.urlBase,
		"--upload-key", filepath.Join(p.dir, "keys", "upload_private"),
		"--upload-cert-key", filepath.Join(p.dir, "keys", keys.Ed25519PrivateFile), "--request-delay", "1s"}, p.schedArgs...)
}

// schedulerListens waits for the scheduler's first start to report its
// address and pins it for the starts after a kill.
func (p *project) schedulerListens(ctx context.Context, sched *projectrun.Proc) error {
	addr, err := sched.WaitAddr(ctx, "addr")
	if err != nil {
		return err
	}
	p.schedAddr, p.urlBase = addr, "http://"+addr
	sched.SetArgs(append([]string{"--config", p.configPath, "--listen", anyPort}, p.schedulerArgs()...))
	return nil
}

// simclient describes a simclient process of hosts hosts with its own
// acknowledgement log; duration 0 runs until stopped.
func (p *project) simclient(name string, hosts int, seed uint64, duration time.Duration, failFrac, cheatFrac float64) *projectrun.Proc {
	return p.simclientAt(p.urlBase, name, hosts, seed, duration, failFrac, cheatFrac)
}

// simclientAt is simclient with the hosts asking the scheduler at urlBase.
func (p *project) simclientAt(urlBase, name string, hosts int, seed uint64, duration time.Duration, failFrac, cheatFrac float64) *projectrun.Proc {
	ack := filepath.Join(filepath.Dir(p.dir), name+".acks")
	_ = os.Remove(ack)
	p.ackLogs = append(p.ackLogs, ack)
	args := []string{"--url", urlBase + "/scheduler", "--authenticators", p.authPath, "--hosts", strconv.Itoa(hosts),
		"--fail-frac", strconv.FormatFloat(failFrac, 'f', -1, 64), "--cheat-frac", strconv.FormatFloat(cheatFrac, 'f', -1, 64),
		"--compute-time", p.opts.ComputeTime.String(), "--backoff-scale", "0.01", "--backoff-max", "3s",
		"--transfer-attempts", "1000", "--http-timeout", "20s", "--seed", strconv.FormatUint(seed, 10),
		"--ack-log", ack, "--summary-every", "30s",
		// Some tasks' apps trickle, so the scheduler stores trickle-ups
		// through the faults too.
		"--trickle-frac", "0.2",
		// GPU and multi-core hosts run the GPU and multi-threaded versions
		// through the faults too.
		"--gpu-frac", "0.2", "--mt-frac", "0.2"}
	args = append(args, p.simArgs...)
	if duration > 0 {
		args = append(args, "--duration", duration.String())
	}
	return projectrun.New(projectrun.Spec{Name: name, Bin: filepath.Join(p.opts.BinDir, "simclient"), LogDir: filepath.Join(p.dir, "logs"), Args: args})
}
