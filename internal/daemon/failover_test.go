package daemon

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// A daemon given a dead address before its database's runs on the second
// and counts the failover in its own metrics, next to db_retries_total
// for every code at 0. Not parallel: see the RunLoopProgram tests.
func TestRunLoopProgramFailsOverAndCountsIt(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = dead
	var reg *prometheus.Registry
	p := LoopProgram[testConfig]{
		Name:   "test_program",
		Config: testConfigFrom,
		Build: func(_ *cli.Context, _ testConfig, env Env) (Service, func() error, error) {
			reg = env.Registry
			svc := serviceFunc(func(ctx context.Context) (int, error) { return 0, env.Store.Ping(ctx) })
			return svc, nil, nil
		},
	}
	args := []string{"test_program", "--db-dsn", cfg.FormatDSN(), "--db-dsn", dsn, "--listen", "", "--one-pass",
		"--db-retries", "2", "--db-retry-backoff", "1s"}
	if err := RunLoopProgram(context.Background(), args, p); err != nil {
		t.Fatalf("RunLoopProgram with a dead first address: %v", err)
	}
	if reg == nil {
		t.Fatal("Build never ran")
	}
	got, err := testutil.GatherAndCount(reg, "taskserver_test_program_db_failovers_total", "taskserver_test_program_db_retries_total")
	if err != nil || got != 1+len(store.RetryCodes) {
		t.Fatalf("failover and retry series = %d, %v; want 1 + one per code (%d)", got, err, len(store.RetryCodes))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "taskserver_test_program_db_failovers_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 1 {
				t.Errorf("db_failovers_total = %v, want 1", v)
			}
			return
		}
	}
	t.Error("db_failovers_total not registered")
}

func TestPassBackoffAfterADatabaseFailureIsCappedByDBMaxBackoff(t *testing.T) {
	t.Parallel()
	opts := LoopOptions{Sleep: time.Second, DBMaxBackoff: 5 * time.Second}
	dbErr := &mysql.MySQLError{Number: 2013}
	other := errors.New("handler failed")
	for failures := 1; failures < 40; failures++ {
		if d := passBackoff(opts, 30*time.Second, failures, dbErr); d > 5*time.Second {
			t.Errorf("%d database failures: pause %s, want at most --db-retry-backoff 5s", failures, d)
		}
	}
	if d := passBackoff(opts, 30*time.Second, 10, other); d != 30*time.Second {
		t.Errorf("10 other failures: pause %s, want the loop's own cap 30s", d)
	}
	if d := passBackoff(LoopOptions{Sleep: time.Second}, 30*time.Second, 10, dbErr); d != 30*time.Second {
		t.Errorf("no DBMaxBackoff: pause %s, want 30s", d)
	}
}
