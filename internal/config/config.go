// Package config builds a program's configuration from three layers: the
// project's configuration file (YAML, one file shared by every program),
// environment variables, and command-line flags, later layers winning. Every
// option is a urfave/cli flag, so --help documents all of them, and every
// option has a default that works for a local project.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/taskserver/taskserver/internal/dsnlist"
)

// EnvPrefix prefixes every option's environment variable:
// --db-dsn is TASKSERVER_DB_DSN.
const EnvPrefix = "TASKSERVER_"

// Flag names shared by every program.
const (
	FlagConfig      = "config"
	FlagDBDSN       = "db-dsn"
	FlagProjectDir  = "project-dir"
	FlagDownloadDir = "download-dir"
	FlagUploadDir   = "upload-dir"
	FlagFanout      = "fanout"
	FlagLogLevel    = "log-level"
	FlagListen      = "listen"
	FlagAddrFile    = "addr-file"
	FlagMod         = "mod"
	FlagModIndex    = "mod-index"
	FlagOnePass     = "one-pass"
	FlagSleep       = "sleep"
	FlagBatch       = "batch"
	FlagPassTimeout = "pass-timeout"
	FlagShmPath     = "shm-path"
	// FlagPlanClassSpec is the project's plan_class_spec.xml, read by the
	// scheduler and by taskctl app-version add (PlanClassSpecFlag).
	FlagPlanClassSpec = "plan-class-spec"
	// FlagDBRetries and FlagDBRetryBackoff tune how the store retries a
	// refused statement and waits for a database that is not answering.
	FlagDBRetries      = "db-retries"
	FlagDBRetryBackoff = "db-retry-backoff"
)

// EnvName returns the environment variable for a flag name.
func EnvName(flag string) string {
	b := []byte(flag)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return EnvPrefix + string(b)
}

// CommonFlags are the options every program takes. listenDefault is the
// program's own /metrics and /healthz address.
func CommonFlags(listenDefault string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagConfig, Usage: "project configuration file (YAML; keys are these flag names)", EnvVars: []string{EnvName(FlagConfig)}},
		&cli.StringSliceFlag{Name: FlagDBDSN, Value: cli.NewStringSlice(DefaultDBDSN), EnvVars: []string{EnvName(FlagDBDSN)},
			Usage: "database DSN (go-sql-driver/mysql form); several addresses of one database (the nodes of a Galera cluster) " +
				"as a comma-separated list, a repeated flag or a YAML list: new connections go to one and move to the next when it " +
				"is unreachable or not ready (a comma inside one DSN is written %2C)"},
		&cli.IntFlag{Name: FlagDBRetries, Value: DefaultDBRetries, EnvVars: []string{EnvName(FlagDBRetries)},
			Usage: "times a database statement or transaction is run again after a deadlock or certification conflict (1213), " +
				"a lock-wait timeout (1205), a node not ready (1047), or a connection lost before it could have committed; 0: never " +
				"(a node's fault is retried for at least --" + FlagDBRetryBackoff + " however many attempts that takes)"},
		&cli.DurationFlag{Name: FlagDBRetryBackoff, Value: DefaultDBRetryBackoff, EnvVars: []string{EnvName(FlagDBRetryBackoff)},
			Usage: "longest pause between attempts when no database address answers, and after a pass that failed on the database; " +
				"also the least time a node's fault (lost, unreachable, not ready) is retried for"},
		&cli.StringFlag{Name: FlagProjectDir, Value: ".", Usage: "project directory; relative paths below are under it", EnvVars: []string{EnvName(FlagProjectDir)}},
		&cli.StringFlag{Name: FlagDownloadDir, Value: "download", Usage: "directory of input and app files served to clients", EnvVars: []string{EnvName(FlagDownloadDir)}},
		&cli.StringFlag{Name: FlagUploadDir, Value: "upload", Usage: "directory where uploaded output files are stored", EnvVars: []string{EnvName(FlagUploadDir)}},
		&cli.IntFlag{Name: FlagFanout, Value: 1024, Usage: "number of hashed sub-directories under the download and upload directories", EnvVars: []string{EnvName(FlagFanout)}},
		&cli.StringFlag{Name: FlagLogLevel, Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: []string{EnvName(FlagLogLevel)}},
		&cli.StringFlag{Name: FlagListen, Value: listenDefault, Usage: "address of the /metrics and /healthz listener (empty: none; port 0: any free port, see --" + FlagAddrFile + ")", EnvVars: []string{EnvName(FlagListen)}},
		&cli.StringFlag{Name: FlagAddrFile, Usage: "file to write, once listening, the address each listener bound, one line \"<flag name> <host:port>\" (e.g. \"listen 127.0.0.1:40123\"); for a program started with port 0; one file per program, so not in the shared configuration file", EnvVars: []string{EnvName(FlagAddrFile)}},
	}
}

// DefaultDBDSN is the default --db-dsn: a local server's taskserver
// database.
const DefaultDBDSN = "root@tcp(127.0.0.1:3306)/taskserver"

// DefaultDBRetries is the default --db-retries: the five retries the store
// always made, enough for the bursts of certification conflicts a cluster
// under load shows.
const DefaultDBRetries = 5

// DefaultDBRetryBackoff is the default --db-retry-backoff: a Galera
// cluster evicts a dead node within about 5 s (its suspect timeout), so
// pausing longer only delays the recovery.
const DefaultDBRetryBackoff = 5 * time.Second

// maxDBRetries bounds --db-retries: with the back-off, more would hold a
// call for minutes.
const maxDBRetries = 100

// LoopFlags are the options of every enumerating daemon.
func LoopFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: FlagMod, Value: 1, Usage: "number of replicas sharing this daemon's work (each takes the rows whose id hashes to its mod-index: CRC32 of the id, modulo mod)", EnvVars: []string{EnvName(FlagMod)}},
		&cli.IntFlag{Name: FlagModIndex, Value: 0, Usage: "this replica's index, 0 <= mod-index < mod", EnvVars: []string{EnvName(FlagModIndex)}},
		&cli.BoolFlag{Name: FlagOnePass, Usage: "run one pass and exit", EnvVars: []string{EnvName(FlagOnePass)}},
		&cli.DurationFlag{Name: FlagSleep, Value: time.Second, Usage: "sleep between passes that found nothing to do (jittered)", EnvVars: []string{EnvName(FlagSleep)}},
		&cli.IntFlag{Name: FlagBatch, Value: 500, Usage: "rows enumerated per query", EnvVars: []string{EnvName(FlagBatch)}},
		&cli.DurationFlag{Name: FlagPassTimeout, Value: DefaultPassTimeout, Usage: "longest one pass may run; a pass past it " +
			"is cancelled and counts as failed, and /healthz fails while one runs past it. The default leaves room for a " +
			"--batch of slow checker or handler calls and lock waits, yet shows a hung database or handler within minutes; " +
			"raise it, or lower --batch, if passes that do work are cut off (pass_errors_total{kind=\"timeout\"})", EnvVars: []string{EnvName(FlagPassTimeout)}},
	}
}

// DefaultPassTimeout is the default --pass-timeout: 5 minutes, six times
// InnoDB's default 50 s lock-wait timeout and room for a --batch of 500
// checker or handler calls of half a second each. A pass that takes
// longer is more likely hung than busy.
const DefaultPassTimeout = 5 * time.Minute

// ShmFlag is the path of the feeder's shared-memory cache; Common.ShmPath
// resolves it.
func ShmFlag() cli.Flag {
	return &cli.StringFlag{Name: FlagShmPath, Usage: "shared-memory cache file shared by the feeder and schedulers " +
		"(default: one per project directory, /dev/shm/taskserver-<directory name>-<hash of its absolute path>)",
		EnvVars: []string{EnvName(FlagShmPath)}}
}

// PlanClassSpecFlag is the project's plan classes file (BOINC's
// plan_class_spec.xml format), one flag and config key for every program
// that reads it. Load it with planclass.Load(Common.Path(value),
// c.IsSet(FlagPlanClassSpec)): the default file may be missing, one named
// explicitly must exist.
func PlanClassSpecFlag() cli.Flag {
	return &cli.StringFlag{Name: FlagPlanClassSpec, Value: "plan_class_spec.xml", EnvVars: []string{EnvName(FlagPlanClassSpec)},
		Usage: "the project's plan classes (BOINC's plan_class_spec.xml format): app versions with a plan class are sent only to hosts the class accepts, and taskctl app-version add refuses a class not defined here; relative to --" + FlagProjectDir + "; the default file may be missing (no plan classes), a file named explicitly must exist"}
}

// ShmPath is the shared-memory cache file: p (--shm-path) resolved against
// the project directory, or, when p is empty, DefaultShmPath of the
// project directory. The feeder, the schedulers and taskctl compute it
// the same way, so a project's programs agree without naming it.
func (c Common) ShmPath(p string) (string, error) {
	if p != "" {
		return c.Path(p), nil
	}
	return DefaultShmPath(c.ProjectDir)
}

// DefaultShmPath is the cache file of the project in dir: in /dev/shm,
// named after the directory and a hash of its absolute path with symbolic
// links resolved. One fixed name for every project made two projects, or
// two checkouts, on one machine share a cache, each feeder filling it with
// the other's results.
func DefaultShmPath(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("shared-memory cache path: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	sum := sha256.Sum256([]byte(abs))
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, filepath.Base(abs))
	if len(name) > 32 {
		name = name[:32]
	}
	return "/dev/shm/taskserver-" + name + "-" + hex.EncodeToString(sum[:6]), nil
}

// LoadFile applies the configuration file named by --config to every flag
// not already set on the command line or in the environment. Keys the
// program does not know are ignored: the file is shared by all programs.
// Use it as the cli.App's Before hook.
func LoadFile(c *cli.Context) error { return loadFile(c, nil) }

// LoadFileKeys is LoadFile for only the named keys: for a subcommand whose
// other flags share a name, but not a meaning, with another program's
// (taskctl app-version add's --code-sign-key is a private key, the
// scheduler's a public one).
func LoadFileKeys(keys ...string) cli.BeforeFunc {
	only := map[string]bool{}
	for _, k := range keys {
		only[k] = true
	}
	return func(c *cli.Context) error { return loadFile(c, only) }
}

// loadFile applies the configuration file's keys, only those in only
// when it is not nil.
func loadFile(c *cli.Context, only map[string]bool) error {
	path := c.String(FlagConfig)
	if path == "" {
		return nil
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	values, err := Parse(body)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	known := map[string]bool{}
	var flags []cli.Flag
	if c.Command != nil {
		flags = append(flags, c.Command.Flags...)
	}
	if c.App != nil {
		flags = append(flags, c.App.Flags...)
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	for k, v := range values {
		if !known[k] || c.IsSet(k) || (only != nil && !only[k]) {
			continue
		}
		if err := c.Set(k, v); err != nil {
			return fmt.Errorf("config file %s: key %s: %w", path, k, err)
		}
	}
	return nil
}

// listKeys are the options whose value may be a YAML list, read as its
// items joined by commas, the form the flag takes.
var listKeys = map[string]bool{FlagDBDSN: true}

// Parse reads a configuration file: a flat YAML mapping from option names to
// scalar values, apart from the daemons list (see Daemons), which it skips,
// and the options that take a list (db-dsn), which may be a YAML list of
// scalars.
func Parse(body []byte) (map[string]string, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if k == DaemonsKey { // the supervisor's list: read by Daemons
			continue
		}
		if list, ok := v.([]any); ok && listKeys[k] {
			items := make([]string, len(list))
			for i, item := range list {
				s, ok := scalar(item)
				if !ok {
					return nil, fmt.Errorf("key %s: item %d: want a scalar value, got %T", k, i+1, item)
				}
				items[i] = s
			}
			out[k] = strings.Join(items, ",")
			continue
		}
		s, ok := scalar(v)
		if !ok {
			return nil, fmt.Errorf("key %s: want a scalar value, got %T", k, v)
		}
		out[k] = s
	}
	return out, nil
}

// scalar is a YAML scalar as the flag's text.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int:
		return strconv.Itoa(x), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case nil:
		return "", true
	}
	return "", false
}

// Common is the validated configuration shared by every program.
type Common struct {
	// DBDSN is every --db-dsn address, joined by commas: the form
	// store.Open takes.
	DBDSN string
	// DBRetries is --db-retries; pass it on as DBRetriesOption.
	DBRetries int
	// DBRetryBackoff is --db-retry-backoff.
	DBRetryBackoff time.Duration
	ProjectDir     string
	DownloadDir    string // absolute or relative to the working directory
	UploadDir      string
	Fanout         int
	LogLevel       string
	Listen         string
	// AddrFile is where the program reports the addresses its listeners
	// bound; "" reports none.
	AddrFile string
}

// Loop is the validated configuration of an enumerating daemon.
type Loop struct {
	Mod      int
	ModIndex int
	OnePass  bool
	Sleep    time.Duration
	Batch    int
	// PassTimeout bounds each pass (--pass-timeout).
	PassTimeout time.Duration
}

// CommonFrom reads and validates the shared options.
func CommonFrom(c *cli.Context) (Common, error) {
	cfg := Common{
		DBDSN:          dsnlist.Join(c.StringSlice(FlagDBDSN)),
		DBRetries:      c.Int(FlagDBRetries),
		DBRetryBackoff: c.Duration(FlagDBRetryBackoff),
		ProjectDir:     c.String(FlagProjectDir),
		DownloadDir:    c.String(FlagDownloadDir),
		UploadDir:      c.String(FlagUploadDir),
		Fanout:         c.Int(FlagFanout),
		LogLevel:       c.String(FlagLogLevel),
		Listen:         c.String(FlagListen),
		AddrFile:       c.String(FlagAddrFile),
	}
	cfg.DownloadDir = cfg.Path(cfg.DownloadDir)
	cfg.UploadDir = cfg.Path(cfg.UploadDir)
	var errs []error
	if cfg.DBDSN == "" {
		errs = append(errs, errors.New("--db-dsn is empty"))
	} else if _, err := dsnlist.Split(cfg.DBDSN); err != nil {
		errs = append(errs, fmt.Errorf("--%s: %w", FlagDBDSN, err))
	}
	if cfg.DBRetries < 0 || cfg.DBRetries > maxDBRetries {
		errs = append(errs, fmt.Errorf("--%s %d: want 0..%d", FlagDBRetries, cfg.DBRetries, maxDBRetries))
	}
	if cfg.DBRetryBackoff <= 0 {
		errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", FlagDBRetryBackoff, cfg.DBRetryBackoff))
	}
	if err := CheckFanout(cfg.Fanout); err != nil {
		errs = append(errs, err)
	}
	switch cfg.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", cfg.LogLevel))
	}
	return cfg, errors.Join(errs...)
}

// DBRetriesOption is --db-retries as store.Options.Retries takes it,
// where 0 means the default and a negative count none.
func (c Common) DBRetriesOption() int {
	if c.DBRetries == 0 {
		return -1
	}
	return c.DBRetries
}

// CheckFanout returns the problem with a --fanout of n, if any; the
// Configs of the daemons that read the fan-out check it with the same words.
func CheckFanout(n int) error {
	if n < 1 || n > 1<<16 {
		return fmt.Errorf("--%s %d: want 1..65536", FlagFanout, n)
	}
	return nil
}

// Path resolves p against the project directory unless it is absolute.
func (c Common) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.ProjectDir, p)
}

// LoopFrom reads the loop options and validates those the loop runner
// uses (--sleep, --pass-timeout). --mod, --mod-index and --batch are
// settings of the service, checked by its Config's Validate with
// CheckPartition, so a bad value is reported once.
func LoopFrom(c *cli.Context) (Loop, error) {
	l := Loop{
		Mod:      c.Int(FlagMod),
		ModIndex: c.Int(FlagModIndex),
		OnePass:  c.Bool(FlagOnePass),
		Sleep:    c.Duration(FlagSleep),
		Batch:    c.Int(FlagBatch),

		PassTimeout: c.Duration(FlagPassTimeout),
	}
	var errs []error
	if l.Sleep <= 0 {
		errs = append(errs, fmt.Errorf("--sleep %s: want a positive duration", l.Sleep))
	}
	if l.PassTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--pass-timeout %s: want a positive duration", l.PassTimeout))
	}
	return l, errors.Join(errs...)
}

// CheckPartition returns the problems with a loop daemon's --mod,
// --mod-index and --batch, worded as the flags are: every daemon's
// Config.Validate checks its own three with it.
func CheckPartition(mod, modIndex, batch int) []error {
	var errs []error
	if mod < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagMod, mod))
	}
	if modIndex < 0 || modIndex >= max(mod, 1) {
		errs = append(errs, fmt.Errorf("--%s %d: want 0 <= mod-index < mod (%d)", FlagModIndex, modIndex, mod))
	}
	if batch < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagBatch, batch))
	}
	return errs
}
