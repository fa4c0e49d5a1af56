package taskctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// withBatches opens the database and gives fn a batch service on it.
// resultsDir is where outputs are read (empty when not needed).
func (t *tool) withBatches(c *cli.Context, resultsDir string, fn func(ctx context.Context, svc *batch.Service) error) error {
	return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
		svc := batch.New(batch.Options{Store: st, DownloadDir: cfg.DownloadDir, Fanout: cfg.Fanout,
			ResultsDir: cfg.Path(resultsDir), Now: t.now})
		return fn(ctx, svc)
	})
}

// findBatch resolves the command's one argument, a batch id or name.
func findBatch(ctx context.Context, c *cli.Context, svc *batch.Service) (row.Batch, error) {
	if err := oneArg(c, "the batch id or name"); err != nil {
		return row.Batch{}, err
	}
	b, err := svc.Find(ctx, c.Args().First())
	if err != nil {
		return b, notFoundHint(err, "list batches with: taskctl batch list")
	}
	return b, nil
}

// oneArg checks the command got exactly one argument, what.
func oneArg(c *cli.Context, what string) error {
	if c.NArg() == 1 {
		return nil
	}
	for _, a := range c.Args().Slice() {
		if strings.HasPrefix(a, "-") {
			// The flag parser stops at the first argument.
			return fmt.Errorf("flags go before the argument: %s %s [flags] ARG", c.App.Name, c.Command.FullName())
		}
	}
	return fmt.Errorf("want one argument, %s (got %d)", what, c.NArg())
}

func (t *tool) batchCommand() *cli.Command {
	return &cli.Command{
		Name:  "batch",
		Usage: "submit and manage batches of jobs",
		Subcommands: []*cli.Command{
			t.batchSubmitCommand(),
			{
				Name:      "status",
				Usage:     "show a batch's jobs by outcome and its instances by state",
				ArgsUsage: "ID|NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON instead of text"}},
				Action: func(c *cli.Context) error {
					return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
						b, err := findBatch(ctx, c, svc)
						if err != nil {
							return err
						}
						st, err := svc.Status(ctx, b)
						if err != nil {
							return err
						}
						if c.Bool("json") {
							return t.printJSON(st)
						}
						t.printBatch(st)
						return nil
					})
				},
			},
			{
				Name:  "list",
				Usage: "list batches with their counts",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
					&cli.StringFlag{Name: "state", Usage: "only batches in this state: in_progress, done or cancelled"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "most batches listed"},
					&cli.Int64Flag{Name: "after", Usage: "only batches with a larger id (paging)"},
				},
				Action: func(c *cli.Context) error {
					p := batch.ListParams{AllUsers: true, Limit: c.Int("limit"), AfterID: c.Int64("after")}
					if s := c.String("state"); s != "" {
						var ok bool
						if p.State, ok = parseBatchState(s); !ok {
							return fmt.Errorf("--state %q: want in_progress, done or cancelled", s)
						}
					}
					if p.Limit < 1 {
						return fmt.Errorf("--limit %d: want >= 1", p.Limit)
					}
					return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
						list, err := svc.List(ctx, p)
						if err != nil {
							return err
						}
						if c.Bool("json") {
							return t.printJSON(list)
						}
						return t.printBatchList(list)
					})
				},
			},
			{
				Name: "cancel",
				Usage: "cancel a batch: its jobs without a result stop (instances in progress are aborted on the " +
					"hosts' next contact); running it again finishes an interrupted cancel",
				ArgsUsage: "ID|NAME",
				Action: func(c *cli.Context) error {
					return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
						b, err := findBatch(ctx, c, svc)
						if err != nil {
							return err
						}
						n, err := svc.Cancel(ctx, b)
						if err != nil {
							return err
						}
						t.printf("cancelled batch %d %s: %d jobs stopped\n", b.ID, b.Name, n)
						return nil
					})
				},
			},
			{
				Name:      "requeue",
				Usage:     "release the batch's held jobs (all, or those held for --reason), each with its limits raised again",
				ArgsUsage: "ID|NAME",
				Flags:     []cli.Flag{reasonFlag(false)},
				Action: func(c *cli.Context) error {
					var reason state.ErrorMask
					if s := c.String("reason"); s != "" {
						var err error
						if reason, err = batch.ParseReason(s); err != nil {
							return err
						}
					}
					return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
						b, err := findBatch(ctx, c, svc)
						if err != nil {
							return err
						}
						n, err := svc.RequeueBatch(ctx, b, reason)
						if err != nil {
							return err
						}
						t.printf("requeued %d jobs of batch %d %s\n", n, b.ID, b.Name)
						return nil
					})
				},
			},
			{
				Name: "outputs",
				Usage: "collect the outputs of the batch's assimilated jobs from the results directory " +
					"(<job>/<open name>, <job>.error) into a folder or a .tar.gz",
				ArgsUsage: "ID|NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "results-dir", Value: "results", EnvVars: []string{config.EnvName("results-dir")},
						Usage: "results directory the assimilator writes (relative to the project directory)"},
					&cli.StringFlag{Name: "dest", Usage: "copy the files into this directory"},
					&cli.StringFlag{Name: "tar", Usage: "write a gzip-compressed tar to this file (\"-\": standard output)"},
				},
				Before: config.LoadFile,
				Action: func(c *cli.Context) error {
					dest, tarPath := c.String("dest"), c.String("tar")
					if (dest == "") == (tarPath == "") {
						return errors.New("give one of --dest DIR or --tar FILE")
					}
					return t.withBatches(c, c.String("results-dir"), func(ctx context.Context, svc *batch.Service) error {
						b, err := findBatch(ctx, c, svc)
						if err != nil {
							return err
						}
						if dest != "" {
							n, err := svc.CopyOutputs(ctx, b, dest)
							if err != nil {
								return err
							}
							t.notef("copied %d files of batch %s to %s\n", n, b.Name, dest)
							return nil
						}
						return t.writeTar(ctx, svc, b, tarPath)
					})
				},
			},
		},
	}
}

// writeTar writes batch b's outputs to path (standard output for "-"),
// through a temporary file so a failure leaves no half archive behind.
func (t *tool) writeTar(ctx context.Context, svc *batch.Service, b row.Batch, path string) error {
	if path == "-" {
		_, err := svc.WriteTarGz(ctx, b, t.stdout)
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("--tar: %w", err)
	}
	n, err := svc.WriteTarGz(ctx, b, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("--tar %s: %w", path, err)
	}
	t.notef("wrote %d files of batch %s to %s\n", n, b.Name, path)
	return nil
}

func (t *tool) batchSubmitCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "app", Required: true, Usage: "app the jobs are for"},
		&cli.StringFlag{Name: "name", Required: true, Usage: "batch name, unique; jobs are named <name>_<job name>"},
		&cli.StringFlag{Name: "description", Usage: "what the batch is for"},
		&cli.StringFlag{Name: "idempotency-key", Usage: "a submission repeated with this key returns the first batch and creates nothing"},
		&cli.StringFlag{Name: "input-dir", Usage: "one job per regular file in this directory (hidden files skipped), named by the file"},
		&cli.StringSliceFlag{Name: "input", Usage: "one job per file (repeatable), named by the file"},
		&cli.StringFlag{Name: "jobs", Usage: "one job per line of this file (- for standard input), as create_work --stdin reads: " +
			"[--name N] [--command-line X] [--remote-file URL,NBYTES,MD5] FILE|shared:NAME ...; blank and # lines skipped"},
	}
	return &cli.Command{
		Name: "submit",
		Usage: "create a batch: one job per input file, or per line of --jobs, all in one transaction; " +
			"job parameters default to the input template's and then the project configuration",
		Flags: append(append(flags, templateFlags()...), jobs.Flags()...),
		// Job parameters set in the project file apply here too.
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			params, err := jobs.ParamsFrom(c)
			if err != nil {
				return err
			}
			inT, outT, err := readTemplates(c)
			if err != nil {
				return err
			}
			spec := batch.Spec{App: c.String("app"), Name: c.String("name"), Description: c.String("description"),
				IdempotencyKey: c.String("idempotency-key"), Params: params, InputTemplate: inT, OutputTemplate: outT}
			if spec.Jobs, err = t.batchJobs(c); err != nil {
				return err
			}
			return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
				b, created, err := svc.Submit(ctx, spec)
				if err != nil {
					return notFoundHint(err, "add it with: taskctl app add")
				}
				if !created {
					t.notef("idempotency key already used: batch %d was submitted before; nothing created\n", b.ID)
				}
				t.printf("batch %d %s %d jobs\n", b.ID, b.Name, b.NJobs)
				return nil
			})
		},
	}
}

// batchJobs reads the batch's jobs: from --jobs, or one per file of
// --input-dir or --input. --command-line goes before each job's own (as
// create_work joins them).
func (t *tool) batchJobs(c *cli.Context) ([]batch.Job, error) {
	cl := c.String("command-line")
	join := func(own string) string { return strings.TrimSpace(cl + " " + own) }
	if path := c.String("jobs"); path != "" {
		if c.String("input-dir") != "" || len(c.StringSlice("input")) > 0 {
			return nil, errors.New("give --jobs, --input-dir or --input, not two")
		}
		return t.readJobsFile(path, join)
	}
	paths, err := inputPaths(c.String("input-dir"), c.StringSlice("input"))
	if err != nil {
		return nil, err
	}
	var out []batch.Job
	for _, p := range paths {
		in, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read input: %w", err)
		}
		out = append(out, batch.Job{Name: filepath.Base(p), Inputs: []jobs.Input{{Data: in}}, CommandLine: join("")})
	}
	return out, nil
}

// readJobsFile reads a --jobs file: a job per line (see parseJobLine),
// named by --name, else by its first local file, else by its line number.
// Every file is read here, before anything is staged.
func (t *tool) readJobsFile(path string, commandLine func(own string) string) ([]batch.Job, error) {
	var text []byte
	var err error
	if path == "-" {
		text, err = io.ReadAll(t.stdin)
	} else {
		text, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--jobs: %w", err)
	}
	var out []batch.Job
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		where := fmt.Sprintf("--jobs %s line %d", path, i+1)
		jl, err := parseJobLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		ins, err := jl.inputs.load(t.stdin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		name := jl.name
		if name == "" {
			name = filepath.Base(jl.inputs.firstPath())
		}
		if name == "." || name == "" {
			name = strconv.Itoa(i + 1)
		}
		out = append(out, batch.Job{Name: name, Inputs: ins, CommandLine: commandLine(jl.commandLine)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--jobs %s: no jobs", path)
	}
	return out, nil
}

// inputPaths lists the input files: those given, or the regular,
// non-hidden files of dir by name.
func inputPaths(dir string, files []string) ([]string, error) {
	switch {
	case dir != "" && len(files) > 0:
		return nil, errors.New("give --input-dir or --input, not both")
	case dir == "" && len(files) == 0:
		return nil, errors.New("give --input-dir DIR or --input FILE...")
	case dir == "":
		return files, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--input-dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Name()[0] == '.' || !e.Type().IsRegular() {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--input-dir %s: no input files", dir)
	}
	sort.Strings(out)
	return out, nil
}

func parseBatchState(s string) (row.BatchState, bool) {
	for _, st := range []row.BatchState{row.BatchInProgress, row.BatchDone, row.BatchCancelled} {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// reasonFlag is --reason, a hold reason.
func reasonFlag(required bool) cli.Flag {
	return &cli.StringFlag{Name: "reason", Required: required,
		Usage: "hold reason: too_many_error_results, too_many_total_results, too_many_success_results, couldnt_send_result, no_canonical_result"}
}

func (t *tool) printJSON(v any) error {
	enc := json.NewEncoder(t.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (t *tool) printBatch(s batch.Status) {
	c := s.Counts
	t.printf("batch %d %s (app %s) %s\n", s.ID, s.Name, s.App, s.State)
	if s.Description != "" {
		t.printf("description: %s\n", s.Description)
	}
	t.printf("jobs %d: done %d, pending %d, held %d, errored %d (cancelled %d); assimilated %d; credit %g\n",
		c.Jobs, c.Done, c.Pending, c.Held, c.Errored, c.Cancelled, c.Assimilated, c.Credit)
	t.printf("instances: unsent %d, in progress %d, over %d\n", c.Unsent, c.InProgress, c.Over)
}

func (t *tool) printBatchList(list []batch.Status) error {
	w := tabwriter.NewWriter(t.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "ID\tNAME\tAPP\tSTATE\tJOBS\tDONE\tPENDING\tHELD\tERRORED\tASSIMILATED\n")
	for _, s := range list {
		c := s.Counts
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", s.ID, s.Name, s.App, s.State,
			c.Jobs, c.Done, c.Pending, c.Held, c.Errored, c.Assimilated)
	}
	return w.Flush()
}
