package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/httpserve"
	"github.com/taskserver/taskserver/internal/store"
)

// Config is a daemon's typed configuration (see the package doc).
type Config interface {
	// Validate returns every problem at once, each naming its flag.
	Validate() error
}

// LoopProgram describes an enumerating daemon's command line and how to
// build its service from its Config C; RunLoopProgram does everything the
// daemons share, so a main holds only what makes its program different.
type LoopProgram[C Config] struct {
	// Name is the program's name: the cli.App's name, the "program" log
	// attribute and the metric subsystem of the loop metrics.
	Name  string
	Usage string
	// Listen is the default --listen address; loopback, so metrics are not
	// exposed unless the operator asks.
	Listen string
	// Sleep overrides the default --sleep when non-zero, for a daemon whose
	// work must be picked up sooner than the usual idle pause.
	Sleep time.Duration
	// PassTimeout overrides the default --pass-timeout when non-zero, for
	// a daemon whose one pass is a long job by design (db_dump writes a
	// whole statistics dump in one).
	PassTimeout time.Duration
	// Batch overrides the default --batch when non-zero, for a daemon
	// whose rows are cheap to handle, so that fewer, larger queries read
	// them (db_dump streams whole tables).
	Batch int
	// Flags are the program's own flags, after the common and loop flags.
	Flags []cli.Flag
	// MaxDBConns caps the store's open connections; 0 means 4.
	MaxDBConns int
	// Config turns the flags into the program's Config: the only place
	// they are read as settings. Its Validate runs before the database is
	// opened, and its error is joined with those of the common and loop
	// flags so one run reports every bad flag. common and loop are passed
	// even when they are invalid (zero fields possible).
	Config func(c *cli.Context, common config.Common, loop config.Loop) C
	// Build makes the service from the valid cfg once the store is open;
	// c is there for a plug-in's own flags, which build collaborators
	// (a checker, a handler), not settings. cleanup, which may be nil, runs
	// after the loop ends and its error is returned with the loop's; on
	// error Build releases what it made itself.
	Build func(c *cli.Context, cfg C, env Env) (svc Service, cleanup func() error, err error)
}

// Env is what every daemon has ready before its service is built.
type Env struct {
	Common   config.Common
	Loop     config.Loop
	Log      *slog.Logger
	Registry *prometheus.Registry
	Store    *store.Store
}

// RunLoopProgram parses args for p and runs it: the configuration file,
// environment and flags are validated, then the logger, registry and store
// are set up, the schema checked, the service built and its loop run with
// the /metrics and /healthz listener until ctx ends (or after one pass).
func RunLoopProgram[C Config](ctx context.Context, args []string, p LoopProgram[C]) error {
	flags := append(append(config.CommonFlags(p.Listen), loopFlags(p.Sleep, p.PassTimeout, p.Batch)...), p.Flags...)
	if err := uniqueNames(flags); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	app := &cli.App{
		Name:   p.Name,
		Usage:  p.Usage,
		Flags:  flags,
		Before: config.LoadFile,
		Action: func(c *cli.Context) error { return runLoopProgram(ctx, c, p) },
	}
	return app.RunContext(ctx, args)
}

// JoinDistinct joins errs (nil, single or joined errors), reporting each
// problem once: a setting shared by the common flags and a daemon's Config
// (--fanout) is checked by both, in the same words.
func JoinDistinct(errs ...error) error {
	var out []error
	seen := map[string]bool{}
	var add func(err error)
	add = func(err error) {
		if parts := joined(err); parts != nil {
			for _, e := range parts {
				add(e)
			}
			return
		}
		if err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	for _, err := range errs {
		add(err)
	}
	return errors.Join(out...)
}

// joined returns the errors err joins if it is an errors.Join (its message
// is theirs, one a line), else nil: another error with several causes keeps
// its own message.
func joined(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	parts := j.Unwrap()
	msgs := make([]string, len(parts))
	for i, e := range parts {
		msgs[i] = e.Error()
	}
	if strings.Join(msgs, "\n") != err.Error() {
		return nil
	}
	return parts
}

// uniqueNames reports a flag name taken twice, which the flag package would
// panic on: a project's own flag (see the public plug-in API) may collide
// with the daemon's.
func uniqueNames(flags []cli.Flag) error {
	seen := map[string]bool{}
	for _, f := range flags {
		for _, n := range f.Names() {
			if seen[n] {
				return fmt.Errorf("flag --%s is defined twice: a program's own flag must not take the name of one of the daemon's", n)
			}
			seen[n] = true
		}
	}
	return nil
}

// loopFlags are config.LoopFlags with --sleep, --pass-timeout and --batch
// defaulting to sleep, passTimeout and batch where those are set.
func loopFlags(sleep, passTimeout time.Duration, batch int) []cli.Flag {
	flags := config.LoopFlags()
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.DurationFlag:
			if f.Name == config.FlagSleep && sleep > 0 {
				f.Value = sleep
			}
			if f.Name == config.FlagPassTimeout && passTimeout > 0 {
				f.Value = passTimeout
			}
		case *cli.IntFlag:
			if f.Name == config.FlagBatch && batch > 0 {
				f.Value = batch
			}
		}
	}
	return flags
}

func runLoopProgram[C Config](ctx context.Context, c *cli.Context, p LoopProgram[C]) (err error) {
	common, cerr := config.CommonFrom(c)
	loop, lerr := config.LoopFrom(c)
	cfg := p.Config(c, common, loop)
	if err := JoinDistinct(cerr, lerr, cfg.Validate()); err != nil {
		return err
	}
	log := NewLogger(p.Name, common.LogLevel)
	reg := NewRegistry(p.Name)
	maxConns := p.MaxDBConns
	if maxConns <= 0 {
		maxConns = 4
	}
	opts := NewDBMetrics(reg, p.Name).StoreOptions(common)
	opts.MaxOpenConns = maxConns
	st, err := store.Open(ctx, common.DBDSN, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.SchemaCheck(ctx); err != nil {
		return err
	}
	svc, cleanup, err := p.Build(c, cfg, Env{Common: common, Loop: loop, Log: log, Registry: reg, Store: st})
	if err != nil {
		return err
	}
	if cleanup != nil {
		defer func() { err = errors.Join(err, cleanup()) }()
	}
	return RunLoop(ctx, log, reg, common.Listen, httpserve.NewAddrFile(common.AddrFile), NewLoopMetrics(reg, p.Name), svc,
		LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass, PassTimeout: loop.PassTimeout, DBMaxBackoff: common.DBRetryBackoff})
}
