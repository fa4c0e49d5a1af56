package paperbench

import (
	"context"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/privatedb"
)

// ErrNoMariaDB says no MariaDB (or MySQL) server program is installed, so a
// private server cannot be started.
var ErrNoMariaDB = privatedb.ErrNoMariaDB

// MariaDBAvailable reports whether a private server can be started here.
func MariaDBAvailable() bool { return privatedb.Available() }

// privateDB is a MariaDB server the benchmark started for itself.
type privateDB struct {
	srv *privatedb.Server
	dsn string
}

// startPrivateDB starts a private server under dir with a 1 GiB buffer
// pool, 500 connections and a redo log of logSize (empty: the server's
// default).
func startPrivateDB(ctx context.Context, dir, logSize string) (*privateDB, error) {
	s, err := privatedb.Start(ctx, dir, privatedb.Options{BufferPool: "1G", MaxConnections: 500, LogFileSize: logSize})
	if err != nil {
		return nil, err
	}
	return &privateDB{srv: s, dsn: s.DSN()}, nil
}

// pid is the server's process id, whose CPU and I/O are the database's.
func (p *privateDB) pid() int { return p.srv.PID() }

// stop shuts the server down and removes its directory.
func (p *privateDB) stop() { p.srv.Stop() }

// withDatabase returns serverDSN naming database name.
func withDatabase(serverDSN, name string) (string, error) {
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}

func tail(b []byte, n int) []byte { return privatedb.Tail(b, n) }
