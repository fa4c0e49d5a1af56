package paperbench

import (
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
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrNoMariaDB says no MariaDB (or MySQL) server program is installed, so a
// private server cannot be started.
var ErrNoMariaDB = errors.New("no mariadbd or mysqld program found (install mariadb-server, or give --dsn)")

// privateDB is a MariaDB server the benchmark started for itself.
type privateDB struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	dsn  string
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

// MariaDBAvailable reports whether a private server can be started here.
func MariaDBAvailable() bool {
	_, err1 := lookProgram("mariadbd", "mysqld")
	_, err2 := lookProgram("mariadb-install-db", "mysql_install_db")
	return err1 == nil && err2 == nil
}

// startPrivateDB installs a fresh data directory under dir and starts a
// server on a free loopback port with default durability, a 1 GiB buffer
// pool and 500 connections. It waits until the server answers.
func startPrivateDB(ctx context.Context, dir string) (*privateDB, error) {
	server, err := lookProgram("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	install, err := lookProgram("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	data := filepath.Join(dir, "data")
	out, err := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+u.Username).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", filepath.Base(install), err, tail(out, 2000))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "mariadbd.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(server, "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "sock"),
		"--pid-file="+filepath.Join(dir, "pid"), "--port="+strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--skip-name-resolve", "--user="+u.Username, "--innodb-buffer-pool-size=1G", "--max-connections=500",
		// As a packaged server: clients' text (host names, stderr) is UTF-8.
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C reaches only us, and we stop it last.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(server), err)
	}
	p := &privateDB{dir: dir, cmd: cmd, done: make(chan struct{}),
		dsn: fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := ping(ctx, p.dsn); err == nil {
			return p, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "mariadbd.log"))
			return nil, fmt.Errorf("private database did not answer: %w\n%s", errors.Join(err, ctx.Err()), tail(log, 2000))
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(dir, "mariadbd.log"))
			return nil, fmt.Errorf("private database exited at start:\n%s", tail(log, 2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pid is the server's process id, whose CPU and I/O are the database's.
func (p *privateDB) pid() int { return p.cmd.Process.Pid }

// stop shuts the server down (SIGTERM, a minute's grace, then SIGKILL) and
// removes its directory.
func (p *privateDB) stop() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(p.dir)
}

// ping opens dsn and pings it once.
func ping(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(pctx)
}

// withDatabase returns serverDSN naming database name.
func withDatabase(serverDSN, name string) (string, error) {
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
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

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
