package taskctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
)

// Options are the tool's connections to the outside world, so tests can
// capture its output and fix its clock.
type Options struct {
	// Stdout gets results (tables, ids, the new authenticator); Stderr gets
	// notes for the human. nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Stdin is where --password-stdin reads; nil means os.Stdin.
	Stdin io.Reader
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// openTimeout bounds how long a command waits for the database: an operator
// would rather see an error than a hang.
const openTimeout = 30 * time.Second

// tool holds what every command needs.
type tool struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	now            func() time.Time
}

// NewApp returns the command-line application. Run it with RunContext and
// the full argument list (program name first).
func NewApp(opts Options) *cli.App {
	t := &tool{stdout: opts.Stdout, stderr: opts.Stderr, stdin: opts.Stdin, now: opts.Now}
	if t.stdout == nil {
		t.stdout = os.Stdout
	}
	if t.stderr == nil {
		t.stderr = os.Stderr
	}
	if t.stdin == nil {
		t.stdin = os.Stdin
	}
	if t.now == nil {
		t.now = time.Now
	}
	var flags []cli.Flag
	for _, f := range config.CommonFlags("") {
		switch f.Names()[0] {
		case config.FlagListen, config.FlagAddrFile: // the tool serves nothing
		default:
			flags = append(flags, f)
		}
	}
	return &cli.App{
		Name:      "taskctl",
		Usage:     "operate a task-server project: schema, catalog, users, teams, jobs, shared files, batches, known answers, status, trickles, statistics export, keys",
		Flags:     flags,
		Before:    config.LoadFile,
		Writer:    t.stdout,
		ErrWriter: t.stderr,
		// Errors are returned to the caller (daemon.Main prints them once).
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			t.schemaCommand(),
			t.platformCommand(),
			t.appCommand(),
			t.appVersionCommand(),
			t.userCommand(),
			t.teamCommand(),
			t.jobCommand(),
			t.fileCommand(),
			t.batchCommand(),
			t.knownAnswerCommand(),
			t.statusCommand(),
			t.hostCommand(),
			t.trickleCommand(),
			t.statsCommand(),
			t.keysCommand(),
			t.signCommand(),
			t.importCommand(),
		},
	}
}

// withStore opens the project database for one command and closes it after.
// Unless raw, it first checks the schema is the version this binary knows.
func (t *tool) withStore(c *cli.Context, raw bool, fn func(ctx context.Context, st *store.Store, cfg config.Common) error) error {
	cfg, err := config.CommonFrom(c)
	if err != nil {
		return err
	}
	ctx := c.Context
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	// SyncReads: what an operator reads must include what any node of a
	// cluster just committed (a job submitted a moment ago elsewhere).
	st, err := store.Open(octx, cfg.DBDSN, store.Options{MaxOpenConns: 2, SyncReads: true,
		Retries: cfg.DBRetriesOption(), RetryBackoff: cfg.DBRetryBackoff})
	cancel()
	if err != nil {
		return err
	}
	defer st.Close()
	if !raw {
		if err := st.SchemaCheck(ctx); err != nil {
			return err
		}
	}
	return fn(ctx, st, cfg)
}

// printf writes to standard output; a failed write to the terminal is not
// worth failing a command that already did its work for.
func (t *tool) printf(format string, args ...any) { _, _ = fmt.Fprintf(t.stdout, format, args...) }

// notef writes a note for the human to standard error.
func (t *tool) notef(format string, args ...any) { _, _ = fmt.Fprintf(t.stderr, format, args...) }
