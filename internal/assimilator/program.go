package assimilator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
)

// Built-in handlers, chosen with --handler.
const (
	// HandlerCopy is FileHandler: outputs linked or copied to --results-dir.
	HandlerCopy = "copy"
	// HandlerCommand is CommandHandler running --handler-cmd.
	HandlerCommand = "command"
)

// Flags of the assimilator program.
const (
	FlagApp            = "app"
	FlagHandler        = "handler"
	FlagHandlerCmd     = "handler-cmd"
	FlagHandlerTimeout = "handler-timeout"
	FlagResultsDir     = "results-dir"
)

// HandlerConfig chooses and configures a built-in handler.
type HandlerConfig struct {
	// Kind is HandlerCopy or HandlerCommand; empty means HandlerCommand if
	// Command is set, else HandlerCopy.
	Kind string
	// ResultsDir is FileHandler's directory.
	ResultsDir string
	// Command is CommandHandler's program and fixed arguments, split at
	// white space (no shell quoting: put anything fancier in a script).
	Command string
	// Timeout bounds one run of Command; 0 means no limit.
	Timeout time.Duration
	// UploadDir and Fanout locate output files.
	UploadDir string
	Fanout    int
	// Log receives the command's output on success (debug).
	Log *slog.Logger
}

// kind resolves the default handler kind.
func (c HandlerConfig) kind() string {
	if c.Kind != "" {
		return c.Kind
	}
	if strings.TrimSpace(c.Command) != "" {
		return HandlerCommand
	}
	return HandlerCopy
}

// Validate reports every problem with the configuration, as flag names.
func (c HandlerConfig) Validate() error {
	var errs []error
	switch c.kind() {
	case HandlerCopy:
		if c.ResultsDir == "" {
			errs = append(errs, fmt.Errorf("--%s is empty", FlagResultsDir))
		}
		if strings.TrimSpace(c.Command) != "" {
			errs = append(errs, fmt.Errorf("--%s is set but --%s is %s", FlagHandlerCmd, FlagHandler, HandlerCopy))
		}
	case HandlerCommand:
		if strings.TrimSpace(c.Command) == "" {
			errs = append(errs, fmt.Errorf("--%s %s needs --%s", FlagHandler, HandlerCommand, FlagHandlerCmd))
		}
	default:
		errs = append(errs, fmt.Errorf("--%s %q: want %s or %s", FlagHandler, c.Kind, HandlerCopy, HandlerCommand))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--%s %s: want 0 (no limit) or more", FlagHandlerTimeout, c.Timeout))
	}
	return errors.Join(errs...)
}

// NewHandler returns the built-in handler c describes.
func NewHandler(c HandlerConfig) (Handler, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.kind() == HandlerCommand {
		return CommandHandler{Argv: strings.Fields(c.Command), Timeout: c.Timeout, UploadDir: c.UploadDir,
			Fanout: c.Fanout, Log: c.Log}, nil
	}
	return &FileHandler{Dir: c.ResultsDir, UploadDir: c.UploadDir, Fanout: c.Fanout}, nil
}

// Program is an assimilator program: the stock one (cmd/assimilator, with
// the built-in handlers), or a project's own, which brings its Go handler
// through the public package assimilator at the module root.
type Program struct {
	// Usage is the one-line description; empty means the stock one.
	Usage string
	// Flags are the program's own flags, after the daemon's and --app.
	Flags []cli.Flag
	// Check validates Flags before the database is opened; it may be nil.
	Check func(c *cli.Context) error
	// Handler builds the science code's handler once the configuration is
	// valid and the store open. nil means the built-in handler chosen by
	// --handler (with --handler-cmd, --handler-timeout, --results-dir).
	Handler func(c *cli.Context, env daemon.Env) (Handler, error)
}

// Main runs p as the process's program: flags from os.Args, the loop until
// SIGINT or SIGTERM, exit status 1 with one line on error. Call it from main
// and nothing else.
func Main(p Program) {
	daemon.Main(func(ctx context.Context, args []string) error { return Run(ctx, args, p) })
}

// Run parses args and runs the assimilator daemon p describes until ctx
// ends (or after one pass with --one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	usage := p.Usage
	if usage == "" {
		usage = "hand the canonical output of finished jobs to the project, record failed ones"
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: FlagApp, Usage: "app whose finished jobs to handle (required)",
			EnvVars: []string{config.EnvName(FlagApp)}},
	}
	if p.Handler == nil {
		flags = append(flags,
			&cli.StringFlag{Name: FlagHandler, Usage: "built-in handler: copy (outputs to --results-dir) or command " +
				"(runs --handler-cmd); default command if --handler-cmd is set, else copy",
				EnvVars: []string{config.EnvName(FlagHandler)}},
			&cli.StringFlag{Name: FlagResultsDir, Value: "results",
				Usage: "copy: directory receiving <job name> (canonical output) and <job name>.error (failed job) files; " +
					"outputs are hard-linked from the upload directory when it is on the same file system, else copied",
				EnvVars: []string{config.EnvName(FlagResultsDir)}},
			&cli.StringFlag{Name: FlagHandlerCmd,
				Usage: "command: program and fixed arguments (split at spaces) run per job with the output paths " +
					"appended and TASKSERVER_JOB_NAME, _JOB_ID, _BATCH, _ERROR_MASK, _ERROR_NAMES set; exit 0 = done",
				EnvVars: []string{config.EnvName(FlagHandlerCmd)}},
			&cli.DurationFlag{Name: FlagHandlerTimeout, Value: 5 * time.Minute,
				Usage:   "command: kill a run after this long and retry the job later (0 = no limit)",
				EnvVars: []string{config.EnvName(FlagHandlerTimeout)}},
		)
	}
	flags = append(flags, p.Flags...)
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[programConfig]{
		Name:   "assimilator",
		Usage:  usage,
		Listen: "127.0.0.1:9105",
		Flags:  flags,
		Config: func(c *cli.Context, common config.Common, loop config.Loop) programConfig {
			cfg := programConfig{Config: Config{App: c.String(FlagApp), Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch}}
			if p.Handler == nil {
				h := handlerConfig(c, common)
				cfg.handler = &h
			}
			if p.Check != nil {
				cfg.ownErr = p.Check(c)
			}
			return cfg
		},
		Build: func(c *cli.Context, cfg programConfig, env daemon.Env) (daemon.Service, func() error, error) {
			var h Handler
			var err error
			if cfg.handler != nil {
				hc := *cfg.handler
				hc.Log = env.Log
				h, err = NewHandler(hc)
			} else {
				h, err = p.Handler(c, env)
			}
			if err != nil {
				return nil, nil, err
			}
			if h == nil {
				return nil, nil, errors.New("assimilator: the program's Handler returned no handler")
			}
			RegisterBacklog(env.Registry, env.Store, cfg.App)
			svc, err := New(cfg.Config, Deps{Store: env.Store, Handler: h, Log: env.Log, Metrics: NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}

// programConfig is what an assimilator program reads from its flags: the
// service's Config, the built-in handler's (nil for a program with its own
// handler, built in Build once the store is open), and the problems with
// the program's own flags.
type programConfig struct {
	Config
	handler *HandlerConfig
	ownErr  error
}

// Validate returns every problem with the program's flags.
func (c programConfig) Validate() error {
	var herr error
	if c.handler != nil {
		herr = c.handler.Validate()
	}
	return errors.Join(c.Config.Validate(), herr, c.ownErr)
}

// errAppMissing is the error of a command line without --app: every project
// names its own apps, so no default could be right.
var errAppMissing = fmt.Errorf("--%s is missing: name the app whose finished jobs to handle (or set %s, or app: in --config)",
	FlagApp, config.EnvName(FlagApp))

// handlerConfig reads the built-in handler flags; paths are resolved
// against the project directory of common.
func handlerConfig(c *cli.Context, common config.Common) HandlerConfig {
	return HandlerConfig{
		Kind:       c.String(FlagHandler),
		ResultsDir: common.Path(c.String(FlagResultsDir)),
		Command:    c.String(FlagHandlerCmd),
		Timeout:    c.Duration(FlagHandlerTimeout),
		UploadDir:  common.UploadDir,
		Fanout:     common.Fanout,
	}
}
