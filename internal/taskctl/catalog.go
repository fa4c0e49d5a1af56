package taskctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) platformCommand() *cli.Command {
	return &cli.Command{
		Name:  "platform",
		Usage: "manage platforms (OS/CPU combinations such as x86_64-pc-linux-gnu)",
		Subcommands: []*cli.Command{{
			Name:  "add",
			Usage: "add a platform; prints its id",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "name", Required: true, Usage: "platform name as clients report it, e.g. x86_64-pc-linux-gnu"},
				&cli.StringFlag{Name: "user-friendly-name", Usage: "name shown to people (default: --name)"},
			},
			Action: func(c *cli.Context) error {
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					p := row.Platform{CreateTime: t.now().Unix(), Name: c.String("name"),
						UserFriendlyName: orDefault(c.String("user-friendly-name"), c.String("name"))}
					id, err := st.PlatformInsert(ctx, p)
					if err != nil {
						return err
					}
					t.printf("platform %d %s\n", id, p.Name)
					return nil
				})
			},
		}},
	}
}

func (t *tool) appCommand() *cli.Command {
	return &cli.Command{
		Name:  "app",
		Usage: "manage apps",
		Subcommands: []*cli.Command{{
			Name:  "add",
			Usage: "add an app; prints its id",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "name", Required: true, Usage: "app name used in the database and the protocol"},
				&cli.StringFlag{Name: "user-friendly-name", Usage: "name shown to people (default: --name)"},
				&cli.IntFlag{Name: "min-version", Usage: "oldest app version number sent to clients"},
				&cli.Float64Flag{Name: "weight", Value: 1, Usage: "share of work this app gets relative to others"},
			}, append(appPolicyFlags(), appTemplateFlags()...)...),
			Action: func(c *cli.Context) error {
				a := row.App{CreateTime: t.now().Unix(), Name: c.String("name"),
					UserFriendlyName: orDefault(c.String("user-friendly-name"), c.String("name")),
					MinVersion:       c.Int("min-version"), Weight: c.Float64("weight")}
				if err := applyAppFlags(c, &a, false); err != nil {
					return err
				}
				in, out, err := appTemplates(c)
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					if err := t.putTemplates(ctx, st, &a, in, out); err != nil {
						return err
					}
					id, err := st.AppInsert(ctx, a)
					if err != nil {
						return err
					}
					t.printf("app %d %s\n", id, a.Name)
					return nil
				})
			},
		}, {
			Name: "set",
			Usage: "change an app's settings; only the flags given change (daemons pick the change up within " +
				"their cache refresh)",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "name", Required: true, Usage: "app to change"},
				&cli.StringFlag{Name: "user-friendly-name", Usage: "name shown to people"},
				&cli.IntFlag{Name: "min-version", Usage: "oldest app version number sent to clients"},
				&cli.Float64Flag{Name: "weight", Usage: "share of work this app gets relative to others"},
				&cli.BoolFlag{Name: "deprecated", Usage: "stop sending the app's work and refuse new batches for it"},
			}, appPolicyFlags()...),
			Action: func(c *cli.Context) error {
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					a, err := st.AppGetByName(ctx, c.String("name"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl app add")
					}
					if c.IsSet("user-friendly-name") {
						a.UserFriendlyName = c.String("user-friendly-name")
					}
					if c.IsSet("min-version") {
						a.MinVersion = c.Int("min-version")
					}
					if c.IsSet("weight") {
						a.Weight = c.Float64("weight")
					}
					if c.IsSet("deprecated") {
						a.Deprecated = c.Bool("deprecated")
					}
					if err := applyAppFlags(c, &a, true); err != nil {
						return err
					}
					if err := st.AppUpdate(ctx, a); err != nil {
						return err
					}
					t.printf("app %d %s: adaptive_replication=%t credit_policy=%s hold_failed_jobs=%t "+
						"known_answer_fraction=%g homogeneous_redundancy=%d weight=%g min_version=%d deprecated=%t beta=%t\n",
						a.ID, a.Name, a.AdaptiveReplication, orDefault(a.CreditPolicy, row.CreditFpops), a.HoldFailedJobs,
						a.KnownAnswerFraction, a.HomogeneousRedundancy, a.Weight, a.MinVersion, a.Deprecated, a.Beta)
					return nil
				})
			},
		}, t.appTemplatesCommand()},
	}
}

// appPolicyFlags are the per-app policies of the job lifecycle.
func appPolicyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "adaptive-replication", Usage: "send a job to one trusted host instead of a full quorum when possible"},
		&cli.StringFlag{Name: "credit-policy", Value: row.CreditFpops,
			Usage: "credit of a valid result: fpops (from the job's FLOP estimate), fixed (the job's --fixed-credit), median (of the quorum's claims)"},
		&cli.BoolFlag{Name: "hold-failed-jobs", Usage: "put a job that exhausts its limits on hold (taskctl job requeue) instead of failing it"},
		&cli.Float64Flag{Name: "known-answer-fraction", Usage: "share of new jobs that get a known-answer job mixed in, 0..1 (taskctl known-answer add)"},
		&cli.IntFlag{Name: "homogeneous-redundancy", Usage: "send a job's instances only to similar hosts: 0 off, 1 fine (OS, CPU vendor and model), 2 coarse (OS and vendor)"},
		&cli.BoolFlag{Name: "beta", Usage: "a beta app: its work goes only to volunteers whose project preferences accept beta work (taskctl user prefs --beta)"},
	}
}

// applyAppFlags copies the policy flags into a, only those given on the
// command line when onlySet, and checks the result.
func applyAppFlags(c *cli.Context, a *row.App, onlySet bool) error {
	use := func(name string) bool { return !onlySet || c.IsSet(name) }
	if use("adaptive-replication") {
		a.AdaptiveReplication = c.Bool("adaptive-replication")
	}
	if use("credit-policy") {
		a.CreditPolicy = c.String("credit-policy")
	}
	if use("hold-failed-jobs") {
		a.HoldFailedJobs = c.Bool("hold-failed-jobs")
	}
	if use("known-answer-fraction") {
		a.KnownAnswerFraction = c.Float64("known-answer-fraction")
	}
	if use("homogeneous-redundancy") {
		a.HomogeneousRedundancy = c.Int("homogeneous-redundancy")
	}
	if use("beta") {
		a.Beta = c.Bool("beta")
	}
	var errs []error
	switch a.CreditPolicy {
	case "", row.CreditFpops, row.CreditFixed, row.CreditMedian:
	default:
		errs = append(errs, fmt.Errorf("--credit-policy %q: want fpops, fixed or median", a.CreditPolicy))
	}
	if f := a.KnownAnswerFraction; !(f >= 0 && f <= 1) {
		errs = append(errs, fmt.Errorf("--known-answer-fraction %g: want 0..1", f))
	}
	if hr := a.HomogeneousRedundancy; hr < 0 || hr > 2 {
		errs = append(errs, fmt.Errorf("--homogeneous-redundancy %d: want 0, 1 or 2", hr))
	}
	if !(a.Weight > 0) {
		errs = append(errs, fmt.Errorf("--weight %g: want > 0", a.Weight))
	}
	if a.MinVersion < 0 {
		errs = append(errs, fmt.Errorf("--min-version %d: want >= 0", a.MinVersion))
	}
	return errors.Join(errs...)
}

func (t *tool) appVersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "app-version",
		Usage: "manage app versions (one build of an app for one platform)",
		Subcommands: []*cli.Command{{
			Name: "add",
			Usage: "add an app version; prints its id. With --file, the files are signed (or their offline signatures " +
				"checked), copied into the download directory and listed in the version's xml_doc",
			// Only --plan-class-spec comes from the config file: the
			// scheduler's --code-sign-key there is a public key, this
			// command's a private one.
			Before: config.LoadFileKeys(config.FlagPlanClassSpec),
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "app", Required: true, Usage: "app name"},
				&cli.StringFlag{Name: "platform", Required: true, Usage: "platform name"},
				&cli.IntFlag{Name: "version-num", Required: true, Usage: "version number, e.g. 100 for 1.00"},
				&cli.StringFlag{Name: "plan-class", Usage: "plan class, defined in --" + config.FlagPlanClassSpec + " (empty: plain CPU version)"},
				config.PlanClassSpecFlag(),
				&cli.BoolFlag{Name: "beta", Usage: "a beta version: sent only to volunteers whose project preferences accept beta work; others get the app's best version that is not a beta"},
				&cli.StringSliceFlag{Name: "file", Usage: "a file of the version (repeatable; the first is the main program). " +
					"Without --file the version has no files: only the simulated client can run it"},
				&cli.StringFlag{Name: "cmdline", Usage: "command-line arguments of this version, which the client passes the " +
					"application after the job's own (BOINC's <cmdline> of an app version)"},
				&cli.StringFlag{Name: "code-sign-key", Usage: "sign the files here with this code-signing private key (the code_sign_private that keys generate --code-sign-out wrote, e.g. on removable media)"},
				&cli.StringFlag{Name: "signatures", Usage: "file of signatures made offline with: taskctl sign --key KEY FILE..."},
				&cli.StringFlag{Name: "code-sign-public", Value: "keys/code_sign_public",
					Usage: "code-signing public key the signatures are checked against (skipped with a note if the file does not exist)"},
			},
			Action: func(c *cli.Context) error {
				if c.Int("version-num") <= 0 {
					return fmt.Errorf("--version-num %d: want > 0", c.Int("version-num"))
				}
				paths := c.StringSlice("file")
				if len(paths) == 0 && (c.String("code-sign-key") != "" || c.String("signatures") != "") {
					return errors.New("--code-sign-key and --signatures sign --file: give the version's files")
				}
				if err := appversion.CheckCmdline(c.String("cmdline")); err != nil {
					return fmt.Errorf("--cmdline: %w", err)
				}
				cfg, err := config.CommonFrom(c)
				if err != nil {
					return err
				}
				if err := checkPlanClass(c, cfg); err != nil {
					return err
				}
				var files []versionFile
				ver := appversion.Version{Cmdline: c.String("cmdline")}
				if len(paths) > 0 {
					files, err = describeFiles(paths, c.String("app"), c.Int("version-num"), c.String("platform"))
					if err != nil {
						return err
					}
					if err := t.signFiles(files, cfg.Path(c.String("code-sign-key")), c.String("signatures"),
						cfg.Path(c.String("code-sign-public"))); err != nil {
						return err
					}
					for _, f := range files {
						ver.Files = append(ver.Files, f.f)
					}
				}
				doc, err := appversion.Format(ver)
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
					app, err := st.AppGetByName(ctx, c.String("app"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl app add")
					}
					plat, err := st.PlatformGetByName(ctx, c.String("platform"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl platform add")
					}
					// Files first: a version row must never name files the
					// data server cannot serve.
					if err := installFiles(files, cfg.DownloadDir, cfg.Fanout); err != nil {
						return err
					}
					v := row.AppVersion{CreateTime: t.now().Unix(), AppID: app.ID, VersionNum: c.Int("version-num"),
						PlatformID: plat.ID, PlanClass: c.String("plan-class"), XMLDoc: doc, Beta: c.Bool("beta")}
					id, err := st.AppVersionInsert(ctx, v)
					if err != nil {
						return err
					}
					t.printf("app_version %d %s %d %s\n", id, app.Name, v.VersionNum, plat.Name)
					for _, f := range files {
						t.notef("installed %s as %s\n", f.path, f.f.Name)
					}
					return nil
				})
			},
		}},
	}
}

// checkPlanClass refuses a --plan-class the project's plan_class_spec.xml
// does not define, or defines with an element the scheduler cannot
// evaluate: a version of it would be stored and never sent.
func checkPlanClass(c *cli.Context, cfg config.Common) error {
	name := c.String("plan-class")
	if name == "" {
		return nil
	}
	path := cfg.Path(c.String(config.FlagPlanClassSpec))
	specs, err := planclass.Load(path, c.IsSet(config.FlagPlanClassSpec))
	if err != nil {
		return fmt.Errorf("--%s: %w", config.FlagPlanClassSpec, err)
	}
	if specs == nil {
		return fmt.Errorf("--plan-class %q: the project has no plan classes: %s does not exist (define the class there, "+
			"in BOINC's plan_class_spec.xml format, or name the file with --%s)", name, path, config.FlagPlanClassSpec)
	}
	err = specs.Supported(name)
	var r *planclass.Refusal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, planclass.ErrUnknown):
		defined := "none"
		if names := specs.Names(); len(names) > 0 {
			defined = strings.Join(names, ", ")
		}
		return fmt.Errorf("--plan-class %q: not defined in %s (defined: %s)", name, path, defined)
	case errors.As(err, &r):
		return fmt.Errorf("--plan-class %q: <%s> in %s: %s; its versions would be sent to no host", name, r.Rule, path, r.Detail)
	default:
		return fmt.Errorf("--plan-class %q: %w", name, err)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// notFoundHint adds what to do to a not-found error.
func notFoundHint(err error, hint string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w (%s)", err, hint)
	}
	return err
}
