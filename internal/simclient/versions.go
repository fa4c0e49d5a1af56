package simclient

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/taskserver/taskserver/internal/protocol"
)

// versionKey names an app version as a reply's <app_version> does.
type versionKey struct {
	app       string
	version   int
	planClass string
}

// versionUsage is how a task of an app version runs, from the reply's
// <app_version>: on which resource and how much of it, and the speed the
// server told the client to assume.
type versionUsage struct {
	// coproc is the <coproc> type ("" for a CPU version), count the
	// instances a task uses.
	coproc string
	count  float64
	// avgNCPUs is the CPUs a task uses: the threads of a multi-threaded
	// version, the CPU share of a GPU version.
	avgNCPUs float64
	flops    float64
}

// usageOf reads an <app_version>: its first coprocessor with a positive
// count, if any, decides the resource.
func usageOf(av protocol.AppVersion) versionUsage {
	u := versionUsage{avgNCPUs: av.AvgNCPUs, flops: av.Flops}
	for _, c := range av.Coprocs {
		if c.Count > 0 && strings.TrimSpace(c.Type) != "" {
			u.coproc, u.count = strings.TrimSpace(c.Type), c.Count
			break
		}
	}
	return u
}

// resourceType maps the coprocessor names clients and old servers use to
// the resource names: "CUDA" is NVIDIA, "AMD" is ATI.
func resourceType(name string) string {
	switch strings.ToUpper(name) {
	case "CUDA", "NVIDIA":
		return protocol.ResourceNVIDIA
	case "ATI", "AMD", "CAL":
		return protocol.ResourceAMD
	}
	return name
}

// place decides where a task of version u runs on h: the resource index,
// its width there, the CPUs it keeps busy, and, for a coprocessor the
// host lacks, why it cannot run.
func (h *host) place(u versionUsage) (rsc int, width, cpus float64, noDevice string) {
	if u.coproc == "" {
		// A multi-threaded version runs on the CPUs the host has, at
		// most (the real client caps avg_ncpus at its CPU count).
		width = 1
		if u.avgNCPUs >= 1 {
			width = min(u.avgNCPUs, float64(h.ncpus))
		}
		return 0, width, width, ""
	}
	want := resourceType(u.coproc)
	for i, g := range h.gpus {
		if g.model.Type == want {
			return 1 + i, u.count, max(u.avgNCPUs, 0), ""
		}
	}
	return 0, 1, 1, fmt.Sprintf("app version needs a %s coprocessor; host has none", u.coproc)
}

// VersionStats are the tasks of one app version the hosts computed and
// their elapsed times: what the server's per-host estimates learn from.
type VersionStats struct {
	Project   string  `json:"project"`
	App       string  `json:"app"`
	Version   int     `json:"version"`
	PlanClass string  `json:"plan_class,omitempty"`
	Tasks     int64   `json:"tasks"`
	MeanSecs  float64 `json:"mean_elapsed_seconds"`
	sum       float64
}

// versionRecorder collects VersionStats across hosts.
type versionRecorder struct {
	mu       sync.Mutex
	projects []Project
	by       map[[2]any]*VersionStats
}

func (v *versionRecorder) add(project int, res protocol.Result, app string, elapsed float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by == nil {
		v.by = map[[2]any]*VersionStats{}
	}
	k := [2]any{project, versionKey{app, res.VersionNum, res.PlanClass}}
	s := v.by[k]
	if s == nil {
		name := ""
		if project < len(v.projects) {
			name = v.projects[project].Name
		}
		s = &VersionStats{Project: name, App: app, Version: res.VersionNum, PlanClass: res.PlanClass}
		v.by[k] = s
	}
	s.Tasks++
	s.sum += elapsed
	s.MeanSecs = s.sum / float64(s.Tasks)
}

func (v *versionRecorder) snapshot() []VersionStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]VersionStats, 0, len(v.by))
	for _, s := range v.by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b VersionStats) int {
		return strings.Compare(fmt.Sprint(a.Project, a.App, a.Version, a.PlanClass), fmt.Sprint(b.Project, b.App, b.Version, b.PlanClass))
	})
	return out
}
