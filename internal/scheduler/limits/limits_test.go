package limits

import (
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
)

const (
	cpu = protocol.ResourceCPU
	nv  = protocol.ResourceNVIDIA
	amd = protocol.ResourceAMD
)

type task struct{ app, resource string }

func TestAllow(t *testing.T) {
	t.Parallel()
	perCPU2 := Set{CPU: Limit{Jobs: 2, PerInstance: true}}
	for _, tc := range []struct {
		name      string
		cfg       Config
		instances map[string]int
		maxJobs   int
		held      []task
		try       task
		want      Reason
	}{
		{name: "no limits", held: []task{{"a", cpu}, {"a", cpu}}, try: task{"a", cpu}, want: None},
		{name: "per CPU: under", cfg: Config{Project: perCPU2}, instances: map[string]int{cpu: 2},
			held: []task{{"a", cpu}, {"a", cpu}, {"a", cpu}}, try: task{"a", cpu}, want: None},
		{name: "per CPU: reached", cfg: Config{Project: perCPU2}, instances: map[string]int{cpu: 2},
			held: []task{{"a", cpu}, {"a", cpu}, {"b", cpu}, {"b", cpu}}, try: task{"a", cpu}, want: CPU},
		{name: "per CPU: a host reporting no CPUs counts one", cfg: Config{Project: perCPU2},
			held: []task{{"a", cpu}, {"a", cpu}}, try: task{"a", cpu}, want: CPU},
		{name: "per CPU limit does not count GPU tasks", cfg: Config{Project: perCPU2}, instances: map[string]int{cpu: 1},
			held: []task{{"a", nv}, {"a", nv}, {"a", nv}, {"a", cpu}}, try: task{"a", cpu}, want: None},
		{name: "per CPU limit does not bound GPU tasks", cfg: Config{Project: perCPU2}, instances: map[string]int{cpu: 1},
			held: []task{{"a", cpu}, {"a", cpu}}, try: task{"a", nv}, want: None},
		{name: "per GPU: scaled by that type's count", cfg: Config{Project: Set{GPU: Limit{Jobs: 2, PerInstance: true}}},
			instances: map[string]int{cpu: 4, nv: 2}, held: []task{{"a", nv}, {"a", nv}, {"a", nv}}, try: task{"a", nv}, want: None},
		{name: "per GPU: reached", cfg: Config{Project: Set{GPU: Limit{Jobs: 2, PerInstance: true}}},
			instances: map[string]int{cpu: 4, nv: 2}, held: []task{{"a", nv}, {"a", nv}, {"a", nv}, {"a", nv}}, try: task{"a", nv}, want: GPU},
		{name: "per GPU: each type apart", cfg: Config{Project: Set{GPU: Limit{Jobs: 1, PerInstance: true}}},
			instances: map[string]int{nv: 1, amd: 1}, held: []task{{"a", nv}}, try: task{"a", amd}, want: None},
		{name: "absolute GPU limit", cfg: Config{Project: Set{GPU: Limit{Jobs: 3}}},
			instances: map[string]int{nv: 4}, held: []task{{"a", nv}, {"a", nv}, {"a", nv}}, try: task{"a", nv}, want: GPU},
		{name: "total: reached across resources", cfg: Config{Project: Set{Total: Limit{Jobs: 3}}},
			instances: map[string]int{cpu: 8, nv: 1}, held: []task{{"a", nv}, {"a", cpu}, {"b", cpu}}, try: task{"a", cpu}, want: Total},
		{name: "app: reached", cfg: Config{Apps: map[string]Set{"a": {Total: Limit{Jobs: 2}}}},
			held: []task{{"a", cpu}, {"a", nv}}, try: task{"a", cpu}, want: App},
		{name: "app: other apps free", cfg: Config{Apps: map[string]Set{"a": {Total: Limit{Jobs: 2}}}},
			held: []task{{"a", cpu}, {"a", cpu}, {"b", cpu}}, try: task{"b", cpu}, want: None},
		{name: "app: under", cfg: Config{Apps: map[string]Set{"a": {Total: Limit{Jobs: 2}}}},
			held: []task{{"a", cpu}, {"b", cpu}, {"b", cpu}}, try: task{"a", cpu}, want: None},
		{name: "app per-GPU limit", cfg: Config{Apps: map[string]Set{"a": {GPU: Limit{Jobs: 1, PerInstance: true}}}},
			instances: map[string]int{nv: 2}, held: []task{{"a", nv}, {"a", nv}}, try: task{"a", nv}, want: App},
		{name: "project limit wins over the app's", cfg: Config{Project: perCPU2, Apps: map[string]Set{"a": {Total: Limit{Jobs: 1}}}},
			instances: map[string]int{cpu: 1}, held: []task{{"a", cpu}, {"a", cpu}}, try: task{"a", cpu}, want: CPU},
		{name: "volunteer's max_jobs", maxJobs: 2, held: []task{{"a", cpu}, {"b", nv}}, try: task{"c", cpu}, want: Volunteer},
		{name: "volunteer's max_jobs under", maxJobs: 3, cfg: Config{Project: perCPU2}, instances: map[string]int{cpu: 4},
			held: []task{{"a", cpu}, {"b", nv}}, try: task{"c", cpu}, want: None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := New(tc.cfg, tc.instances, tc.maxJobs)
			for _, h := range tc.held {
				c.Add(h.app, h.resource)
			}
			if got := c.Allow(tc.try.app, tc.try.resource); got != tc.want {
				t.Errorf("Allow(%s, %s) after %v = %v, want %v", tc.try.app, tc.try.resource, tc.held, got, tc.want)
			}
		})
	}
}

// TestSendsCount checks that the tasks of the reply count as they are
// added: a host with room for three gets three and then a refusal.
func TestSendsCount(t *testing.T) {
	t.Parallel()
	c := New(Config{Project: Set{CPU: Limit{Jobs: 1, PerInstance: true}}, Apps: map[string]Set{"b": {Total: Limit{Jobs: 1}}}},
		map[string]int{cpu: 3}, 0)
	c.Add("a", cpu)
	var got []Reason
	for _, app := range []string{"b", "b", "a", "a"} {
		r := c.Allow(app, cpu)
		if r == None {
			c.Add(app, cpu)
		}
		got = append(got, r)
	}
	want := []Reason{None, App, None, CPU}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("successive Allow = %v, want %v", got, want)
		}
	}
	if c.Held() != 3 {
		t.Errorf("Held() = %d, want 3", c.Held())
	}
}

func TestParseApp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		name string
		n    int
		ok   bool
	}{
		{"einstein=3", "einstein", 3, true},
		{" a b = 2 ", "a b", 2, true},
		{"x=0", "", 0, false},
		{"x=-1", "", 0, false},
		{"x", "", 0, false},
		{"=3", "", 0, false},
		{"x=three", "", 0, false},
	} {
		name, n, err := ParseApp(tc.in)
		if (err == nil) != tc.ok || name != tc.name || n != tc.n {
			t.Errorf("ParseApp(%q) = %q, %d, %v; want %q, %d, ok %v", tc.in, name, n, err, tc.name, tc.n, tc.ok)
		}
	}
}

func TestReasonString(t *testing.T) {
	t.Parallel()
	if Volunteer.String() != "volunteer" || Reason(99).String() != "Reason(99)" {
		t.Errorf("String: %s, %s", Volunteer, Reason(99))
	}
}

func TestParseApps(t *testing.T) {
	t.Parallel()
	got, err := ParseApps([]string{"a=1", "b=2,c=3", ""})
	if err != nil || len(got) != 3 || got["a"] != 1 || got["b"] != 2 || got["c"] != 3 {
		t.Errorf("ParseApps = %v, %v; want a=1 b=2 c=3", got, err)
	}
	if _, err := ParseApps([]string{"a=1", "a=2"}); err == nil {
		t.Error("ParseApps(a twice) = nil error, want one")
	}
	if _, err := ParseApps([]string{"a"}); err == nil {
		t.Error("ParseApps(a) = nil error, want one")
	}
	if got, err := ParseApps(nil); err != nil || got != nil {
		t.Errorf("ParseApps(nil) = %v, %v; want nil, nil", got, err)
	}
}
