// Package limits decides BOINC's limits on the tasks a host holds in
// progress (sched/sched_limit.cpp, config.xml <max_jobs_in_progress>): per
// resource (per CPU, per GPU instance, or absolute), per app, and the
// volunteer's own <max_jobs>. A Counter is built for one request from the
// host's resources and the tasks it holds; the scheduler asks it before
// each send and tells it of each send. Pure: no SQL, no clock.
package limits

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// Limit bounds the tasks of one kind a host holds: Jobs tasks, times the
// host's instances of the resource when PerInstance (BOINC's per_proc).
// Jobs 0 is no limit.
type Limit struct {
	Jobs        int
	PerInstance bool
}

// Set is the limits of one scope (the project, or one app), BOINC's
// JOB_LIMIT: on all its tasks (Total, absolute), on its CPU tasks, and on
// its tasks of each coprocessor type (GPU, scaled by that type's
// instances).
type Set struct {
	Total, CPU, GPU Limit
}

func (s Set) any() bool { return s.Total.Jobs > 0 || s.CPU.Jobs > 0 || s.GPU.Jobs > 0 }

// Config is a project's limits: project-wide, and per app by app name.
type Config struct {
	Project Set
	Apps    map[string]Set
}

// Reason is which limit refused a task; None is none.
type Reason int

const (
	// None: the task may be sent.
	None Reason = iota
	// Total: the host holds as many tasks as the project allows in all
	// (the absolute total limit, or the one task of a quarantined host).
	Total
	// CPU: as many CPU tasks as the project allows (per CPU).
	CPU
	// GPU: as many tasks for this coprocessor as the project allows (per
	// instance).
	GPU
	// App: as many tasks of this app as the project allows.
	App
	// Volunteer: as many tasks as the volunteer's preferences allow
	// (<max_jobs>).
	Volunteer
)

var reasonNames = [...]string{None: "none", Total: "total", CPU: "cpu", GPU: "gpu", App: "app", Volunteer: "volunteer"}

func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// counts are the tasks of one scope: all, and by resource.
type counts struct {
	total int
	by    map[string]int
}

func (c *counts) add(resource string) {
	c.total++
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[resource]++
}

// Counter holds one host's tasks in progress and decides whether it may
// be sent one more. Not safe for concurrent use (one per request).
type Counter struct {
	cfg       Config
	instances map[string]int
	maxJobs   int
	project   counts
	apps      map[string]*counts
}

// New starts a count for a host with instances of each resource
// (protocol.ResourceCPU: its usable CPUs; each coprocessor type: its
// count). maxJobs, if positive, is the volunteer's own limit on all tasks.
func New(cfg Config, instances map[string]int, maxJobs int) *Counter {
	return &Counter{cfg: cfg, instances: instances, maxJobs: maxJobs, apps: map[string]*counts{}}
}

// Add counts a task of app (by name) on resource that the host holds or is
// being sent.
func (c *Counter) Add(app, resource string) {
	c.project.add(resource)
	if s, ok := c.cfg.Apps[app]; ok && s.any() {
		n := c.apps[app]
		if n == nil {
			n = &counts{}
			c.apps[app] = n
		}
		n.add(resource)
	}
}

// Allow returns None if the host may be sent one more task of app on
// resource, else the limit it reached. The volunteer's limit is checked
// first, then the project's, then the app's.
func (c *Counter) Allow(app, resource string) Reason {
	if c.maxJobs > 0 && c.project.total >= c.maxJobs {
		return Volunteer
	}
	if r := c.exceeded(c.cfg.Project, &c.project, resource); r != None {
		return r
	}
	if s, ok := c.cfg.Apps[app]; ok && s.any() {
		n := c.apps[app]
		if n == nil {
			n = &counts{}
		}
		if c.exceeded(s, n, resource) != None {
			return App
		}
	}
	return None
}

// exceeded is BOINC's JOB_LIMIT::exceeded for scope s holding n.
func (c *Counter) exceeded(s Set, n *counts, resource string) Reason {
	if s.Total.Jobs > 0 && n.total >= s.Total.Jobs {
		return Total
	}
	l, r := s.GPU, GPU
	if resource == protocol.ResourceCPU {
		l, r = s.CPU, CPU
	}
	if l.Jobs <= 0 {
		return None
	}
	limit := l.Jobs
	if l.PerInstance {
		limit *= max(c.instances[resource], 1)
	}
	if n.by[resource] >= limit {
		return r
	}
	return None
}

// Held is how many tasks the host is counted to hold in all.
func (c *Counter) Held() int { return c.project.total }

// ParseApp reads one --app-max-in-progress value, NAME=N: at most N tasks
// of app NAME on a host, whatever their resource.
func ParseApp(s string) (name string, jobs int, err error) {
	name, n, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", 0, fmt.Errorf("%q: want APP=N", s)
	}
	jobs, err = strconv.Atoi(strings.TrimSpace(n))
	if err != nil || jobs < 1 {
		return "", 0, fmt.Errorf("%q: want APP=N with N at least 1", s)
	}
	return name, jobs, nil
}

// Remove takes back an Add of a task whose send did not go through.
func (c *Counter) Remove(app, resource string) {
	c.project.remove(resource)
	if n := c.apps[app]; n != nil {
		n.remove(resource)
	}
}

func (c *counts) remove(resource string) {
	if c.total > 0 {
		c.total--
	}
	if c.by[resource] > 0 {
		c.by[resource]--
	}
}

// ParseApps reads the values of a repeatable --app-max-in-progress flag
// (each NAME=N, or several joined by commas as a config file gives them)
// into limits by app name; an app named twice is an error.
func ParseApps(values []string) (map[string]int, error) {
	var out map[string]int
	for _, v := range values {
		for _, one := range strings.Split(v, ",") {
			if strings.TrimSpace(one) == "" {
				continue
			}
			name, n, err := ParseApp(one)
			if err != nil {
				return nil, err
			}
			if _, dup := out[name]; dup {
				return nil, fmt.Errorf("%q: app %s named twice", one, name)
			}
			if out == nil {
				out = map[string]int{}
			}
			out[name] = n
		}
	}
	return out, nil
}
