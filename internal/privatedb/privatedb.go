// Package privatedb starts a MariaDB server of its own for one run: a fresh
// data directory, a free loopback port (another one if the port is taken
// before the server binds it), root without a password. The
// benchmark uses it to measure a server nothing else touches; the chaos
// tool uses it because it must be able to kill the database server and
// start it again on the same port and data directory.
package privatedb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	// The server speaks the MySQL protocol.
	_ "github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// ErrNoMariaDB says no MariaDB (or MySQL) server program is installed, so a
// private server cannot be started.
var ErrNoMariaDB = errors.New("no mariadbd or mysqld program found (install mariadb-server, or give --dsn)")

// Options configures a private server. Zero values mean the defaults.
type Options struct {
	// BufferPool is innodb_buffer_pool_size; default "1G".
	BufferPool string
	// MaxConnections is max_connections; default 500.
	MaxConnections int
	// LogFileSize is innodb_log_file_size, the redo log; empty keeps the
	// server's default (96 MiB in MariaDB 10.11). A log that a run's writes
	// wrap several times makes InnoDB flush pages in bursts to free it,
	// stalling commits meanwhile.
	LogFileSize string
	// StartTimeout bounds how long a start (or restart, with its crash
	// recovery) may take until the server answers; default 90s.
	StartTimeout time.Duration
	// ColdStart starts with an empty buffer pool and leaves none behind:
	// MariaDB otherwise saves the pool's page list at shutdown and reads
	// those pages back at start, so a server started on a copy would begin
	// with the pages of whoever ran before, not of what it is measured on.
	ColdStart bool
	// StatementStats turns performance_schema on, for its per-statement
	// summaries (make bench-scale's SCALE_STATEMENTS). It costs every
	// statement some CPU, so it is off unless asked for.
	StatementStats bool
}

// Server is a MariaDB server started for one run.
type Server struct {
	dir  string
	opts Options
	port int
	args []string // of the next start
	proc *projectrun.Proc
}

// lookProgram finds the first of names on PATH or in the usual sbin
// directories, which a non-login PATH often lacks.
func lookProgram(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/mysql/bin"} {
		for _, n := range names {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", ErrNoMariaDB
}

// Available reports whether a private server can be started here.
func Available() bool {
	_, _, err := Programs()
	return err == nil
}

// Programs returns the paths of the server program (mariadbd or mysqld)
// and of its data-directory installer, or ErrNoMariaDB. The Galera
// cluster's nodes are the same programs.
func Programs() (server, install string, err error) {
	if server, err = lookProgram("mariadbd", "mysqld"); err != nil {
		return "", "", err
	}
	if install, err = lookProgram("mariadb-install-db", "mysql_install_db"); err != nil {
		return "", "", err
	}
	return server, install, nil
}

// Start installs a fresh data directory under dir and starts a server on a
// free loopback port with default durability. It waits until the server
// answers.
func Start(ctx context.Context, dir string, o Options) (*Server, error) {
	_, install, err := Programs()
	if err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	data, tmp, err := dirs(dir)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+u.Username).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", filepath.Base(install), err, Tail(out, 2000))
	}
	s, err := StartOn(ctx, dir, o)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return s, err
}

// dirs returns dir's data and temporary directories, making the latter.
func dirs(dir string) (data, tmp string, err error) {
	// Its own temporary directory: servers installed side by side in the
	// shared /tmp failed on each other's temporary tables ("Error on
	// delete of '/tmp/#sql-temptable-…'").
	tmp = filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", "", fmt.Errorf("private MariaDB temporary directory: %w", err)
	}
	return filepath.Join(dir, "data"), tmp, nil
}

// StartOn starts a server on the data directory Start installed under dir
// (kept by Shutdown, or a copy of one put there), on a free loopback port,
// with o's settings, which may differ from the ones it was filled with: the
// scale benchmark measures one fill under several buffer pools so. It
// waits until the server answers; on failure dir is left as it was.
func StartOn(ctx context.Context, dir string, o Options) (*Server, error) {
	if o.BufferPool == "" {
		o.BufferPool = "1G"
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = 500
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 90 * time.Second
	}
	server, _, err := Programs()
	if err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	data, tmp, err := dirs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		return nil, fmt.Errorf("private MariaDB: no data directory installed in %s: %w", data, err)
	}
	// Its log is the error log, in dir, kept across restarts.
	s := &Server{dir: dir, opts: o, proc: projectrun.New(projectrun.Spec{Name: "mariadbd", Bin: server, LogDir: dir})}
	// MariaDB takes no port 0 it would tell us about: pick a free port,
	// and if someone binds it before the server does, pick another.
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		s.args = []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--socket=" + filepath.Join(dir, "sock"),
			"--pid-file=" + filepath.Join(dir, "pid"), "--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1",
			"--skip-name-resolve", "--user=" + u.Username, "--innodb-buffer-pool-size=" + o.BufferPool,
			// No character set: the server keeps the latin1 of a server without
			// a configuration file, as on a fresh machine; the schema and the
			// connection name utf8mb4 themselves.
			"--max-connections=" + strconv.Itoa(o.MaxConnections)}
		if o.LogFileSize != "" {
			s.args = append(s.args, "--innodb-log-file-size="+o.LogFileSize)
		}
		if o.ColdStart {
			s.args = append(s.args, "--innodb-buffer-pool-dump-at-shutdown=OFF", "--innodb-buffer-pool-load-at-startup=OFF")
		}
		if o.StatementStats {
			s.args = append(s.args, "--performance-schema=ON")
		}
		err := s.launch(ctx)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

// startAttempts bounds the ports Start tries.
const startAttempts = 5

// errAddrInUse says the server could not bind its port: another program
// took it after freePort found it free.
var errAddrInUse = errors.New("port already in use")

// launch starts the server process and waits until it answers.
func (s *Server) launch(ctx context.Context) error {
	// The log is kept across starts: this start's lines begin here.
	var logStart int64
	if fi, err := os.Stat(s.LogPath()); err == nil {
		logStart = fi.Size()
	}
	s.proc.SetArgs(s.args)
	if err := s.proc.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(s.opts.StartTimeout)
	for {
		err := Ping(ctx, s.DSN())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Kill()
			log, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("private database did not answer: %w\n%s", errors.Join(err, ctx.Err()), Tail(log, 2000))
		}
		select {
		case <-s.proc.Done():
			log, _ := os.ReadFile(s.LogPath())
			if int64(len(log)) >= logStart && bytes.Contains(log[logStart:], []byte("Address already in use")) {
				return fmt.Errorf("private database on port %d: %w", s.port, errAddrInUse)
			}
			return fmt.Errorf("private database exited at start:\n%s", Tail(log, 2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DSN is the server's DSN with no database: root@tcp(127.0.0.1:PORT)/.
func (s *Server) DSN() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port) }

// LogPath is the server's error log, kept across restarts.
func (s *Server) LogPath() string { return s.proc.LogPath() }

// PID is the running server's process id, whose CPU and I/O are the
// database's.
func (s *Server) PID() int { return s.proc.PID() }

// Kill kills the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() { s.proc.Kill() }

// Restart starts the server again on the same port and data directory
// after Kill (InnoDB recovers what was committed) and waits until it
// answers.
func (s *Server) Restart(ctx context.Context) error {
	if s.proc.Running() {
		return errors.New("restart private database: still running")
	}
	return s.launch(ctx)
}

// Shutdown shuts the server down cleanly and keeps its directory: every
// committed change is in the data files, which StartOn starts on again
// (as can a copy of them). It fails if the server did not stop within
// five minutes of SIGTERM (it was then killed, and the files need crash
// recovery) or exited with an error.
func (s *Server) Shutdown() error {
	// A clean shutdown of a big buffer pool writes its dirty pages first.
	return s.proc.Stop(5 * time.Minute)
}

// Stop shuts the server down (SIGTERM, a minute's grace, then SIGKILL) and
// removes its directory.
func (s *Server) Stop() {
	// How it ended is nobody's concern: the directory goes with it.
	_ = s.proc.Stop(time.Minute)
	_ = os.RemoveAll(s.dir)
}

// Ping opens dsn and pings it once.
func Ping(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(pctx)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Tail is the last n bytes of b, for error messages quoting a log.
func Tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
