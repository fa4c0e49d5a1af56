package taskctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/projectprefs"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// gpuNames are the names --no-gpu takes for the GPU types, as a volunteer
// knows them.
var gpuNames = map[string]string{
	"nvidia": protocol.ResourceNVIDIA, "cuda": protocol.ResourceNVIDIA,
	"amd": protocol.ResourceAMD, "ati": protocol.ResourceAMD,
	"intel": protocol.ResourceIntel, "intel_gpu": protocol.ResourceIntel,
	"apple": protocol.ResourceApple, "apple_gpu": protocol.ResourceApple,
}

// userPrefsCommand is `taskctl user prefs`: a volunteer's project
// preferences, which BOINC projects let volunteers edit on the web site.
func (t *tool) userPrefsCommand() *cli.Command {
	return &cli.Command{
		Name:  "prefs",
		Usage: "show or change a volunteer's project preferences (BOINC's <project_preferences>); only the flags given change",
		Description: "Without flags, prints the stored document and what the scheduler reads from it. The flags change the\n" +
			"apps the volunteer runs, whether other apps are sent when those have no work, beta work, the processor\n" +
			"types not to use, and the volunteer's own limits; everything else in the document (resource share,\n" +
			"project-specific settings, venues) is kept. The scheduler applies the change from the volunteer's next\n" +
			"request, and sends the document to the client, which then stops asking for work for the processor types\n" +
			"opted out of.",
		ArgsUsage: "EMAIL|NAME",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "apps", Usage: "the apps the volunteer runs, by name, comma-separated (\"\": every app)"},
			&cli.BoolFlag{Name: "allow-other-apps", Usage: "send other apps when the selected ones have no work (<allow_non_preferred_apps>; =false to stop)"},
			&cli.BoolFlag{Name: "beta", Usage: "send beta apps and beta versions (<allow_beta_work>; =false to stop)"},
			&cli.BoolFlag{Name: "no-cpu", Usage: "do not use the CPU (<no_cpu>; =false to use it again)"},
			&cli.StringSliceFlag{Name: "no-gpu", Usage: "GPU types not to use: nvidia, amd, intel, apple, another coprocessor's type, " +
				"\"all\" for every GPU (<no_gpus>), \"none\" to use them all again (repeatable; replaces the GPU opt-outs)"},
			&cli.IntFlag{Name: "max-jobs", Usage: "most tasks in progress on each of the volunteer's hosts (<max_jobs>; 0: the project's limits only)"},
			&cli.IntFlag{Name: "max-cpus", Usage: "most CPUs counted for each of the volunteer's hosts (<max_cpus>; 0: all)"},
		},
		Action: func(c *cli.Context) error {
			if err := oneArg(c, "the account's e-mail address or name"); err != nil {
				return err
			}
			who := strings.TrimSpace(c.Args().First())
			for _, f := range []string{"max-jobs", "max-cpus"} {
				if c.Int(f) < 0 {
					return fmt.Errorf("--%s %d: want 0 (none) or more", f, c.Int(f))
				}
			}
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				u, err := userByEmailOrName(ctx, st, who)
				if err != nil {
					return err
				}
				p, err := projectprefs.Parse(string(u.ProjectPrefs), "")
				if err != nil {
					return fmt.Errorf("user %d <%s>: stored preferences: %w (fix the document; nothing changed)", u.ID, u.EmailAddr, err)
				}
				changed, err := applyPrefsFlags(ctx, c, st, &p)
				if err != nil {
					return err
				}
				doc := string(u.ProjectPrefs)
				if changed {
					doc = projectprefs.Format(p)
					if err := st.UserSetProjectPrefs(ctx, u.ID, doc); err != nil {
						return err
					}
					t.notef("project preferences of user %d <%s> set; the scheduler applies them from the volunteer's next request\n", u.ID, u.EmailAddr)
				}
				return t.printPrefs(ctx, st, doc, p)
			})
		},
	}
}

// applyPrefsFlags changes p as the flags given say, and reports whether any
// was given.
func applyPrefsFlags(ctx context.Context, c *cli.Context, st *store.Store, p *projectprefs.Prefs) (bool, error) {
	changed := false
	if c.IsSet("apps") {
		changed = true
		p.Apps = nil
		for _, name := range strings.Split(c.String("apps"), ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			a, err := st.AppGetByName(ctx, name)
			if err != nil {
				return false, fmt.Errorf("--apps: %w", err)
			}
			if !slices.Contains(p.Apps, a.ID) {
				p.Apps = append(p.Apps, a.ID)
			}
		}
	}
	if c.IsSet("allow-other-apps") {
		changed, p.AllowNonSelected = true, c.Bool("allow-other-apps")
	}
	if c.IsSet("beta") {
		changed, p.AllowBeta = true, c.Bool("beta")
	}
	if c.IsSet("no-cpu") {
		changed = true
		p.NoResource = slices.DeleteFunc(p.NoResource, func(r string) bool { return r == protocol.ResourceCPU })
		if c.Bool("no-cpu") {
			p.NoResource = append(p.NoResource, protocol.ResourceCPU)
		}
	}
	if c.IsSet("no-gpu") {
		changed = true
		p.NoGPUs = false
		p.NoResource = slices.DeleteFunc(p.NoResource, func(r string) bool { return r != protocol.ResourceCPU })
		for _, v := range c.StringSlice("no-gpu") {
			for _, name := range strings.Split(v, ",") {
				name = strings.TrimSpace(name)
				switch strings.ToLower(name) {
				case "", "none":
				case "all":
					p.NoGPUs = true
				default:
					r, ok := gpuNames[strings.ToLower(name)]
					if !ok {
						r = name // a coprocessor declared in cc_config.xml, by its type
					}
					if !slices.Contains(p.NoResource, r) {
						p.NoResource = append(p.NoResource, r)
					}
				}
			}
		}
	}
	if c.IsSet("max-jobs") {
		changed, p.MaxJobs = true, c.Int("max-jobs")
	}
	if c.IsSet("max-cpus") {
		changed, p.MaxCPUs = true, c.Int("max-cpus")
	}
	return changed, nil
}

// printPrefs prints the stored document and what the scheduler reads.
func (t *tool) printPrefs(ctx context.Context, st *store.Store, doc string, p projectprefs.Prefs) error {
	apps := "all"
	if len(p.Apps) > 0 {
		byID := map[int64]string{}
		all, err := st.AppList(ctx)
		if err != nil {
			return err
		}
		for _, a := range all {
			byID[a.ID] = a.Name
		}
		var names []string
		for _, id := range p.Apps {
			n, ok := byID[id]
			if !ok {
				n = fmt.Sprintf("#%d (no such app)", id)
			}
			names = append(names, n)
		}
		apps = strings.Join(names, ",")
	}
	noRsc := strings.Join(p.NoResource, ",")
	if p.NoGPUs {
		noRsc = strings.Trim(noRsc+",all GPUs", ",")
	}
	if noRsc == "" {
		noRsc = "none"
	}
	t.printf("apps: %s\nallow_other_apps: %t\nbeta: %t\nnot_used: %s\nmax_jobs: %d\nmax_cpus: %d\n",
		apps, p.AllowNonSelected, p.AllowBeta, noRsc, p.MaxJobs, p.MaxCPUs)
	if strings.TrimSpace(doc) != "" {
		t.printf("document:\n%s\n", strings.TrimSpace(doc))
	}
	return nil
}

// userByEmailOrName finds an account by its e-mail address or, failing
// that, by its name when exactly one account has it.
func userByEmailOrName(ctx context.Context, st *store.Store, who string) (row.User, error) {
	u, err := st.UserGetByEmail(ctx, strings.ToLower(who))
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return u, err
	}
	us, err := st.UserListByName(ctx, who, 2)
	switch {
	case err != nil:
		return row.User{}, err
	case len(us) == 0:
		return row.User{}, fmt.Errorf("user %q: no account has this e-mail address or name: %w", who, store.ErrNotFound)
	case len(us) > 1:
		return row.User{}, fmt.Errorf("user %q: several accounts have this name; give the e-mail address", who)
	}
	return us[0], nil
}
