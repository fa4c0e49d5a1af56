package taskctl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/scheduler/limits"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// The scheduler's flags the send decision depends on: same names, defaults
// and environment variables as cmd/scheduler's, so one config file sets
// both.
const (
	flagMaxResultsPerRPC    = "max-results-per-rpc"
	flagMaxInProgressPerCPU = "max-in-progress-per-cpu"
	flagMaxInProgressPerGPU = "max-in-progress-per-gpu"
	flagAppMaxInProgress    = "app-max-in-progress"
	flagARTrustValid        = "ar-trust-valid"
	flagQuarantineStreak    = "quarantine-streak"
	flagDailyResultQuota    = "daily-result-quota"
	flagGPUQuotaMultiplier  = "gpu-quota-multiplier"
)

func (t *tool) hostCommand() *cli.Command {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	return &cli.Command{
		Name:  "host",
		Usage: "look into volunteer hosts",
		Subcommands: []*cli.Command{{
			Name:  "explain",
			Usage: "why does a host get (no) work: run the scheduler's send decision for it, changing nothing",
			Description: "Loads the host, its user and its tasks in progress, takes the candidates from the shared-memory cache\n" +
				"(read only) when --shm-path can be read, else the database's unsent results in the feeder's order, and\n" +
				"runs the scheduler's send decision in its dry mode: no slot is claimed, nothing is written. Prints the\n" +
				"verdict on each candidate and why the host would get less than it asks for (the reasons of\n" +
				"taskserver_scheduler_send_shortfall_total). The scheduler itself starts at a random slot; this starts at 0.",
			// The subcommand's own flags come from the config file too.
			Before: config.LoadFile,
			Flags: []cli.Flag{
				&cli.Int64Flag{Name: "host", Required: true, Usage: "host id"},
				&cli.Float64Flag{Name: "seconds", Usage: "work asked for, in seconds (default: one day of each of the host's CPUs)"},
				&cli.Float64Flag{Name: "instances", Usage: "CPUs asked to keep busy (cpu_req_instances; default: the host's CPUs)"},
				&cli.StringSliceFlag{Name: "platform", Usage: "platform the host's client reports, primary first (repeatable; default: the platforms of the app versions it was sent)"},
				config.ShmFlag(),
				&cli.IntFlag{Name: "candidates", Value: 100, Usage: "unsent results read from the database when the cache is not used"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
				&cli.IntFlag{Name: flagMaxResultsPerRPC, Value: 10, EnvVars: env(flagMaxResultsPerRPC),
					Usage: "the scheduler's most new results per reply"},
				&cli.IntFlag{Name: flagMaxInProgressPerCPU, Value: 4, EnvVars: env(flagMaxInProgressPerCPU),
					Usage: "the scheduler's most CPU tasks in progress per CPU of a host"},
				&cli.IntFlag{Name: flagMaxInProgressPerGPU, Value: 0, EnvVars: env(flagMaxInProgressPerGPU),
					Usage: "the scheduler's most tasks in progress per GPU of a host (0: no limit)"},
				&cli.StringSliceFlag{Name: flagAppMaxInProgress, EnvVars: env(flagAppMaxInProgress),
					Usage: "the scheduler's APP=N limits on a host's tasks of an app (repeatable)"},
				&cli.IntFlag{Name: flagARTrustValid, Value: 10, EnvVars: env(flagARTrustValid),
					Usage: "the scheduler's valid results in a row that make a host trusted"},
				&cli.IntFlag{Name: flagQuarantineStreak, Value: 5, EnvVars: env(flagQuarantineStreak),
					Usage: "the scheduler's error streak that quarantines a host (0: off)"},
				&cli.IntFlag{Name: flagDailyResultQuota, Value: 500, EnvVars: env(flagDailyResultQuota),
					Usage: "the scheduler's daily quota of jobs per app version, per CPU or GPU (0: none)"},
				&cli.IntFlag{Name: flagGPUQuotaMultiplier, Value: 1, EnvVars: env(flagGPUQuotaMultiplier),
					Usage: "the scheduler's multiplier of the daily quota per GPU"},
				config.PlanClassSpecFlag(),
			},
			Action: t.hostExplain,
		}, t.hostShowCommand(), hostAppVersionsCommand(t.hostAppVersions)},
	}
}

func (t *tool) hostExplain(c *cli.Context) error {
	return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
		appMax, err := limits.ParseApps(c.StringSlice(flagAppMaxInProgress))
		if err != nil {
			return fmt.Errorf("--%s %w", flagAppMaxInProgress, err)
		}
		p := scheduler.ExplainParams{
			HostID:      c.Int64("host"),
			Platforms:   c.StringSlice("platform"),
			WorkSeconds: c.Float64("seconds"),
			Instances:   c.Float64("instances"),
			Candidates:  c.Int("candidates"),
			Now:         t.now().Unix(),
			Policy: scheduler.Policy{
				MaxResultsPerRPC:    c.Int(flagMaxResultsPerRPC),
				MaxInProgressPerCPU: c.Int(flagMaxInProgressPerCPU),
				ARTrustValid:        c.Int(flagARTrustValid),
				QuarantineStreak:    c.Int(flagQuarantineStreak),
				MaxInProgressPerGPU: c.Int(flagMaxInProgressPerGPU),
				AppMaxInProgress:    appMax,
				DailyResultQuota:    c.Int(flagDailyResultQuota),
				GPUQuotaMultiplier:  c.Int(flagGPUQuotaMultiplier),
			},
		}
		if p.Policy.PlanClasses, err = planclass.Load(cfg.Path(c.String(config.FlagPlanClassSpec)),
			c.IsSet(config.FlagPlanClassSpec)); err != nil {
			return fmt.Errorf("--%s: %w", config.FlagPlanClassSpec, err)
		}
		if p.WorkSeconds < 0 || p.Instances < 0 || p.Candidates < 1 {
			return errors.New("host explain: --seconds and --instances must not be negative, --candidates must be at least 1")
		}
		cachePath, err := cfg.ShmPath(c.String(config.FlagShmPath))
		if err != nil {
			return err
		}
		cache, why := openCacheReadOnly(cachePath)
		if cache != nil {
			defer cache.Close()
			p.Cache = cache
		} else {
			t.notef("candidates from the database (%s)\n", why)
		}
		ex, err := scheduler.Explain(ctx, st, p)
		if errors.Is(err, scheduler.ErrPlatformUnknown) {
			return fmt.Errorf("%w (--platform)", err)
		}
		if err != nil {
			return err
		}
		if c.Bool("json") {
			enc := json.NewEncoder(t.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(ex)
		}
		h, err := st.HostGet(ctx, ex.HostID)
		if err != nil {
			return err
		}
		source := "the database's unsent results, in the feeder's order"
		if ex.Source == "cache" {
			source = "the shared-memory cache " + cachePath
		}
		return t.printExplanation(ex, h, source)
	})
}

// openCacheReadOnly maps the cache at path for reading, or says why not.
func openCacheReadOnly(path string) (*shmcache.Cache, string) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Sprintf("no cache file at %s", path)
	}
	c, err := shmcache.OpenReadOnly(path)
	if err != nil {
		return nil, err.Error()
	}
	if _, _, err := c.Tables(); err != nil {
		_ = c.Close()
		return nil, fmt.Sprintf("cache %s: %v", path, err)
	}
	return c, ""
}

func (t *tool) printExplanation(ex scheduler.Explanation, h row.Host, source string) error {
	quar := ""
	if ex.Quarantined {
		quar = fmt.Sprintf(", quarantined (error streak %d)", h.ErrorStreak)
	}
	t.printf("host %d (user %d): %d CPUs at %.3g GFLOPS, %s RAM, %s free disk; platforms %s\n", ex.HostID, ex.UserID,
		max(h.PNCPUs, 1), h.PFpops/1e9, bytesText(h.MNbytes), bytesText(h.DFree), strings.Join(ex.Platforms, ", "))
	t.printf("coprocessors: %s\n", coprocsSummary(h.Coprocs))
	t.printf("asks for %.0f s of work, %g instances; %d tasks in progress of %d allowed%s\n", ex.WorkSeconds, ex.Instances,
		ex.InProgress, ex.Limit, quar)
	t.printf("%d candidates from %s\n\n", len(ex.Candidates), source)
	if len(ex.Candidates) > 0 {
		tw := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLOT\tRESULT\tJOB\tAPP\tVERDICT\tREASON")
		for _, v := range ex.Candidates {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\n", v.Slot, v.ResultID, v.WorkunitID, v.App, v.Verdict, v.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		t.printf("\n")
	}
	if len(ex.PlanClassRefusals) > 0 {
		apps := slices.Sorted(maps.Keys(ex.PlanClassRefusals))
		for _, a := range apps {
			for _, r := range ex.PlanClassRefusals[a] {
				t.printf("app %s: plan class %s\n", a, r)
			}
		}
		t.printf("\n")
	}
	t.printf("would send %d", ex.WouldSend)
	if rest := restSummary(ex.Candidates); rest != "" {
		t.printf("; reasons for the rest: %s", rest)
	}
	t.printf("\n")
	if ex.Short == "" {
		t.printf("the request would be covered\n")
	} else {
		t.printf("less than asked: %s: %s\n", ex.Short, ex.ShortText)
	}
	return nil
}

// restSummary counts the candidates not sent by reason, most first.
func restSummary(vs []scheduler.Verdict) string {
	counts := map[string]int{}
	for _, v := range vs {
		switch v.Verdict {
		case scheduler.VerdictReject:
			counts[v.Reason]++
		case scheduler.VerdictNotReached:
			counts["not reached ("+v.Reason+")"]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// bytesText is n bytes for a human, "unknown" for 0.
func bytesText(n float64) string {
	if !(n > 0) {
		return "unknown"
	}
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %s", n, units[i])
}
