package boincconfig

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// task accounts for one periodic <task> of config.xml.
func (t *translator) task(e Entry) {
	label := "task " + oneLine(e.Cmd)
	words, err := splitCommand(e.Cmd)
	if err != nil || len(words) == 0 {
		t.rep.unmapped(label, "", OperatorAction, fmt.Sprintf("cannot read the command: %v", err))
		return
	}
	if filepath.Base(words[0]) == "run_in_ops" && len(words) > 1 {
		words = words[1:]
	}
	prog := filepath.Base(words[0])
	switch {
	case e.Disabled:
		t.rep.unmapped(label, "", Disabled, "not carried over")
	case prog == "antique_file_deleter":
		if _, ok := t.byName["file_deleter"]; ok {
			t.rep.mapped(label, "", "our file_deleter sweeps the upload directory for orphans itself (--orphan-every 1h, files older than --orphan-age 24h)", "daemons: file_deleter")
		} else {
			t.rep.unmapped(label, "", OperatorAction, "our file_deleter sweeps orphans itself: add a file_deleter to daemons:")
		}
	case prog == "db_dump":
		t.rep.unmapped(label, "", OperatorAction, "the statistics export for the stats sites: run this server's export on the same schedule instead (it reads our database; the old one no longer changes)")
	case prog == "update_stats":
		t.rep.unmapped(label, "", NoEquivalent, "recent average credit is brought up to date whenever credit is granted")
	case strings.HasSuffix(prog, ".php"):
		t.rep.unmapped(label, "", NoEquivalent, "a web site task (PHP): not part of the task server; keep it with the web site")
	default:
		t.rep.unmapped(label, "", OperatorAction, "a periodic task this server has no counterpart for: run it from cron or a systemd timer if it is still needed (every "+e.Period+")")
	}
}

// Aux is config_aux.xml: the in-progress limits of BOINC's
// <max_jobs_in_progress>.
type Aux struct {
	Project *JobLimit
	Apps    []JobLimit
}

// JobLimit is one <project> or <app> limit set.
type JobLimit struct {
	App   string    `xml:"app_name"`
	Total *RscLimit `xml:"total_limit"`
	CPU   *RscLimit `xml:"cpu_limit"`
	GPU   *RscLimit `xml:"gpu_limit"`
}

// RscLimit is one limit: jobs, per processor or for the host.
type RscLimit struct {
	Jobs    string    `xml:"jobs"`
	PerProc *struct{} `xml:"per_proc"`
}

// ParseAux reads config_aux.xml.
func ParseAux(body []byte) (*Aux, error) {
	var doc struct {
		XMLName xml.Name `xml:"config"`
		Limits  struct {
			Project *JobLimit  `xml:"project"`
			Apps    []JobLimit `xml:"app"`
		} `xml:"max_jobs_in_progress"`
	}
	d := newDecoder(body)
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("config_aux.xml: %w", syntaxErr(err))
	}
	return &Aux{Project: doc.Limits.Project, Apps: doc.Limits.Apps}, nil
}

// aux maps the in-progress limits: a project's per-CPU and per-GPU limits
// and an app's total limit have keys here; the rest do not.
func (t *translator) aux(a *Aux) {
	if p := a.Project; p != nil {
		t.rscLimit("config_aux.xml project cpu_limit", p.CPU, "max-in-progress-per-cpu")
		t.rscLimit("config_aux.xml project gpu_limit", p.GPU, "max-in-progress-per-gpu")
		if p.Total != nil {
			t.rep.unmapped("config_aux.xml project total_limit", p.Total.Jobs, NoEquivalent,
				"no limit on a host's tasks of all apps together (a volunteer's <max_jobs> bounds theirs)")
		}
	}
	apps := map[string]int{}
	for _, l := range a.Apps {
		label := "config_aux.xml app " + l.App
		if l.Total != nil {
			n, err := strconv.Atoi(strings.TrimSpace(l.Total.Jobs))
			switch {
			case err != nil || n < 1 || l.App == "":
				t.rep.unmapped(label+" total_limit", l.Total.Jobs, OperatorAction, "not a limit of whole jobs for a named app; left out")
			case l.Total.PerProc != nil:
				t.rep.unmapped(label+" total_limit", l.Total.Jobs, Differs, "per processor: ours limits an app's tasks per host")
			default:
				apps[l.App] = n
				t.rep.mapped(label+" total_limit", l.Total.Jobs, "", "app-max-in-progress")
			}
		}
		for _, r := range []struct {
			name string
			l    *RscLimit
		}{{"cpu_limit", l.CPU}, {"gpu_limit", l.GPU}} {
			if r.l != nil {
				t.rep.unmapped(label+" "+r.name, r.l.Jobs, NoEquivalent, "ours limits an app's tasks per host whatever the resource (app-max-in-progress)")
			}
		}
	}
	if len(apps) > 0 {
		names := make([]string, 0, len(apps))
		for a := range apps {
			names = append(names, a)
		}
		sort.Strings(names)
		var parts []string
		for _, a := range names {
			parts = append(parts, a+"="+strconv.Itoa(apps[a]))
		}
		t.proj.set("app-max-in-progress", strings.Join(parts, ","), "config_aux.xml")
	}
}

// rscLimit maps a project-wide per-processor limit to key.
func (t *translator) rscLimit(label string, l *RscLimit, key string) {
	if l == nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(l.Jobs))
	switch {
	case err != nil || n < 1:
		t.rep.unmapped(label, l.Jobs, OperatorAction, "not a whole number of jobs; left out")
	case l.PerProc == nil:
		t.rep.unmapped(label, l.Jobs, Differs, "for the whole host: ours is per processor ("+key+")")
	default:
		t.proj.set(key, n, "config_aux.xml")
		t.rep.mapped(label, l.Jobs, "", key)
	}
}
