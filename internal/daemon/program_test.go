package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// The RunLoopProgram tests are not parallel: urfave/cli writes to its
// global --help flag while parsing, which the race detector reports when two
// apps parse at once (a process only ever runs one).

// testConfig is a program's Config: its own --color and the partition.
type testConfig struct {
	color                string
	mod, modIndex, batch int
	fanout               int // a common flag the Config checks too
	ownErr               error
}

func (c testConfig) Validate() error {
	return errors.Join(append(config.CheckPartition(c.mod, c.modIndex, c.batch), config.CheckFanout(c.fanout), c.ownErr)...)
}

func testConfigFrom(c *cli.Context, common config.Common, loop config.Loop) testConfig {
	return testConfig{color: c.String("color"), mod: loop.Mod, modIndex: loop.ModIndex, batch: loop.Batch, fanout: common.Fanout}
}

func TestRunLoopProgramOnePass(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	closeErr := errors.New("close failed")
	var (
		got      Env
		color    string
		passes   int
		cleanups int
	)
	p := LoopProgram[testConfig]{
		Name:   "test_program",
		Listen: "127.0.0.1:0",
		Sleep:  200 * time.Millisecond,
		Flags:  []cli.Flag{&cli.StringFlag{Name: "color", Value: "red"}},
		Config: testConfigFrom,
		Build: func(_ *cli.Context, cfg testConfig, env Env) (Service, func() error, error) {
			got, color = env, cfg.color
			svc := serviceFunc(func(context.Context) (int, error) { passes++; return 1, nil })
			return svc, func() error { cleanups++; return closeErr }, nil
		},
	}
	args := []string{"test_program", "--db-dsn", dsn, "--one-pass", "--mod", "3", "--mod-index", "2", "--pass-timeout", "1m", "--color", "blue"}
	err := RunLoopProgram(context.Background(), args, p)
	if !errors.Is(err, closeErr) {
		t.Fatalf("RunLoopProgram(%v) = %v, want the cleanup's error %v", args, err, closeErr)
	}
	if passes != 1 || cleanups != 1 {
		t.Fatalf("RunLoopProgram(%v) ran %d passes and %d cleanups, want 1 and 1", args, passes, cleanups)
	}
	if got.Store == nil || got.Log == nil || got.Registry == nil {
		t.Fatalf("Build got env %+v, want a store, a logger and a registry", got)
	}
	want := config.Loop{Mod: 3, ModIndex: 2, OnePass: true, Sleep: 200 * time.Millisecond, Batch: 500, PassTimeout: time.Minute}
	if got.Loop != want {
		t.Errorf("Build got loop config %+v, want %+v", got.Loop, want)
	}
	if got.Common.DBDSN != dsn || got.Common.Listen != "127.0.0.1:0" {
		t.Errorf("Build got db-dsn %q listen %q, want %q and the program's default listen", got.Common.DBDSN, got.Common.Listen, dsn)
	}
	if color != "blue" {
		t.Errorf("Build read --color %q, want the program's own flag set to blue", color)
	}
}

// Bad flags are all reported at once, and neither the database nor Build
// is touched: the DSN here would fail to connect.
func TestRunLoopProgramRejectsBadFlagsBeforeTheDatabase(t *testing.T) {
	built := false
	p := LoopProgram[testConfig]{
		Name: "test_program",
		Config: func(c *cli.Context, common config.Common, loop config.Loop) testConfig {
			cfg := testConfigFrom(c, common, loop)
			cfg.ownErr = errors.New("own flag is bad")
			return cfg
		},
		Build: func(*cli.Context, testConfig, Env) (Service, func() error, error) {
			built = true
			return nil, nil, nil
		},
	}
	args := []string{"test_program", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--listen", "", "--one-pass", "--mod", "0", "--sleep", "0s", "--fanout", "0"}
	err := RunLoopProgram(context.Background(), args, p)
	if err == nil || built {
		t.Fatalf("RunLoopProgram(%v) = %v, built %v; want a validation error and no Build", args, err, built)
	}
	for _, want := range []string{"--mod 0", "--sleep 0s", "--fanout 0", "own flag is bad"} {
		if n := strings.Count(err.Error(), want); n != 1 {
			t.Errorf("RunLoopProgram(%v) = %q, mentions %q %d times, want once", args, err, want, n)
		}
	}
	if strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("RunLoopProgram(%v) = %q, want no attempt to reach the database", args, err)
	}
}

func TestRunLoopProgramBuildError(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	boom := errors.New("boom")
	p := LoopProgram[testConfig]{
		Name:   "test_program",
		Config: testConfigFrom,
		Build: func(*cli.Context, testConfig, Env) (Service, func() error, error) {
			return nil, nil, boom
		},
	}
	args := []string{"test_program", "--db-dsn", dsn, "--listen", "", "--one-pass"}
	if err := RunLoopProgram(context.Background(), args, p); !errors.Is(err, boom) {
		t.Fatalf("RunLoopProgram(%v) = %v, want Build's error %v", args, err, boom)
	}
}

// A program's own flag named like one of the daemon's is an error, not the
// flag package's panic.
func TestRunLoopProgramRefusesAFlagDefinedTwice(t *testing.T) {
	p := LoopProgram[testConfig]{Name: "test_program", Flags: []cli.Flag{&cli.StringFlag{Name: "batch"}}, Config: testConfigFrom,
		Build: func(*cli.Context, testConfig, Env) (Service, func() error, error) {
			return nil, nil, errors.New("built")
		}}
	err := RunLoopProgram(context.Background(), []string{"test_program"}, p)
	if err == nil || !strings.Contains(err.Error(), "--batch is defined twice") {
		t.Errorf("RunLoopProgram with a second --batch = %v, want --batch is defined twice", err)
	}
}
