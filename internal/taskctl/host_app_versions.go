package taskctl

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

func hostAppVersionsCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "app-versions",
		Usage: "what a host has shown of each app version it ran: runtimes, rate, daily quota, errors",
		Description: "Prints the host's host_app_version rows: for each app version (or anonymous-platform build) the\n" +
			"valid results measured, the median and mean seconds per GFLOP of estimated work (the scheduler uses\n" +
			"the median's rate once there are enough samples), the daily quota per CPU or GPU (\"full\" is the\n" +
			"project's --daily-result-quota, shrunk by one per error and doubled back per valid result), the jobs\n" +
			"sent today, errors, valid results and the valid streak.",
		Before: config.LoadFile,
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "host", Required: true, Usage: "host id"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: action,
	}
}

// hostVersion is a host_app_version row as host show prints it.
type hostVersion struct {
	row.HostAppVersion
	// Version names the app version: app name, version number, plan class.
	Version string `json:"version"`
	// Rate is the FLOPS the host's own results show (1/median), 0 before
	// any; Trusted says the scheduler uses it (hostav.MinSamples).
	Rate    float64 `json:"rate"`
	Trusted bool    `json:"trusted"`
	// JobsToday is NJobsToday when Day is today, else 0.
	JobsToday int `json:"jobs_today"`
}

func (t *tool) hostAppVersions(c *cli.Context) error {
	return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
		id := c.Int64("host")
		h, err := st.HostGet(ctx, id)
		if err != nil {
			return fmt.Errorf("host %d: %w", id, err)
		}
		havs, err := st.HostAppVersionListByHost(ctx, id)
		if err != nil {
			return err
		}
		names, err := versionNames(ctx, st)
		if err != nil {
			return err
		}
		today := hostav.Day(t.now().Unix())
		out := make([]hostVersion, len(havs))
		for i, r := range havs {
			v := hostVersion{HostAppVersion: r, Version: names.name(r.AppVersionID)}
			if r.EtMedian > 0 {
				v.Rate = 1 / r.EtMedian
				v.Trusted = r.EtN >= hostav.MinSamples
			}
			if r.Day == today {
				v.JobsToday = r.NJobsToday
			}
			out[i] = v
		}
		if c.Bool("json") {
			enc := json.NewEncoder(t.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		t.printf("host %d (user %d): %d CPUs at %.3g GFLOPS (benchmark), %s RAM\n", h.ID, h.UserID, max(h.PNCPUs, 1),
			h.PFpops/1e9, bytesText(h.MNbytes))
		if len(out) == 0 {
			t.printf("no app version run yet\n")
			return nil
		}
		tw := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSAMPLES\tMEDIAN s/GFLOP\tMEAN s/GFLOP\tRATE GFLOPS\tQUOTA/DAY\tTODAY\tERRORS\tVALID\tSTREAK\tTURNAROUND s")
		for _, v := range out {
			rate := "-"
			if v.Rate > 0 {
				rate = fmt.Sprintf("%.3g", v.Rate/1e9)
				if !v.Trusted {
					rate += " (few)"
				}
			}
			quota := "full"
			if v.MaxJobsPerDay > 0 {
				quota = fmt.Sprint(v.MaxJobsPerDay)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.4g\t%.4g\t%s\t%s\t%d\t%d\t%d\t%d\t%.0f\n", v.Version, v.EtN, v.EtMedian*1e9,
				v.EtAvg*1e9, rate, quota, v.JobsToday, v.NErrors, v.NValid, v.ConsecutiveValid, v.TurnaroundAvg)
		}
		return tw.Flush()
	})
}

// versionCatalog names app versions and apps by id.
type versionCatalog struct {
	apps     map[int64]row.App
	versions map[int64]row.AppVersion
}

func versionNames(ctx context.Context, st *store.Store) (versionCatalog, error) {
	apps, err := st.AppList(ctx)
	if err != nil {
		return versionCatalog{}, err
	}
	vs, err := st.AppVersionList(ctx)
	if err != nil {
		return versionCatalog{}, err
	}
	c := versionCatalog{apps: map[int64]row.App{}, versions: map[int64]row.AppVersion{}}
	for _, a := range apps {
		c.apps[a.ID] = a
	}
	for _, v := range vs {
		c.versions[v.ID] = v
	}
	return c, nil
}

// name is "app version_num [plan_class] (#id)", or for an anonymous-platform
// key "app anonymous <resource>".
func (c versionCatalog) name(id int64) string {
	if appID, res, ok := hostav.SplitGeneralizedID(id); ok {
		return fmt.Sprintf("%s anonymous %s", c.appName(appID), hostav.AnonResourceName(res))
	}
	v, ok := c.versions[id]
	if !ok {
		return fmt.Sprintf("#%d (deleted)", id)
	}
	s := fmt.Sprintf("%s %d", c.appName(v.AppID), v.VersionNum)
	if v.PlanClass != "" {
		s += " " + v.PlanClass
	}
	return fmt.Sprintf("%s (#%d)", s, id)
}

func (c versionCatalog) appName(id int64) string {
	if a, ok := c.apps[id]; ok {
		return a.Name
	}
	return fmt.Sprintf("app %d", id)
}
