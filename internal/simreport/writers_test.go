package simreport

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleReport is a small finished run with awkward names.
func sampleReport(t *testing.T) Report {
	t.Helper()
	names := []string{"alpha", `<b&"eta">`, "gamma"}
	r := NewRecorder(names, 3600)
	for p, w := range []float64{50, 30, 20} {
		r.AddTarget(p, w)
	}
	r.AddAvailable(48 * 3600 * 4)
	for h := range 48 {
		at := float64(h+1) * 3600
		r.CPU(0, at, 1800*float64(1+h%3))
		r.CPU(1, at, 1200)
		r.CPU(2, at, 700)
		r.RPC(h%3, at, h%7 == 0)
	}
	r.Fetched(0, 10, 36000)
	r.Completed(0)
	r.Reported(0, true)
	r.Missed(2)
	r.NoWork(1)
	return r.Report(Report{
		Clock: "simulated", Scenario: "reference <test>", Strategy: "edf", RuntimeStat: "average",
		Hosts: 2, CPUs: 4, DurationSeconds: 48 * 3600, WallSeconds: 1.5,
	})
}

// TestJSONKeys pins the key names other tools (make simulate's readers, the
// README's figures) depend on.
func TestJSONKeys(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(sampleReport(t))
	if err != nil {
		t.Fatalf("json.Marshal(report): %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode report into a map: %v", err)
	}
	for _, k := range []string{"clock", "scenario", "strategy", "runtime_stat", "hosts", "cpus",
		"duration_seconds", "wall_seconds", "projects", "totals", "series"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON has no key %q", k)
		}
	}
	projects, ok := m["projects"].([]any)
	if !ok || len(projects) != 3 {
		t.Fatalf("projects = %v, want a list of 3", m["projects"])
	}
	for i, p := range projects {
		pm := p.(map[string]any)
		for _, k := range []string{"name", "resource_share", "achieved_share", "cpu_seconds", "rpcs", "rpc_failures",
			"work_fetched_seconds", "tasks_fetched", "tasks_completed", "tasks_reported", "deadlines_missed", "no_work_replies"} {
			if _, ok := pm[k]; !ok {
				t.Errorf("projects[%d] has no key %q", i, k)
			}
		}
	}
	totals := m["totals"].(map[string]any)
	for _, k := range []string{"cpu_utilisation", "cpu_seconds", "available_cpu_seconds", "idle_cpu_seconds",
		"idle_fraction", "rpcs", "rpc_failures", "max_rpcs_per_minute", "work_fetched_seconds", "tasks_fetched",
		"tasks_completed", "tasks_reported", "deadlines_missed", "max_share_error"} {
		if _, ok := totals[k]; !ok {
			t.Errorf("totals has no key %q", k)
		}
	}
	sample := m["series"].([]any)[0].(map[string]any)
	for _, k := range []string{"time", "shares", "cumulative"} {
		if _, ok := sample[k]; !ok {
			t.Errorf("series[0] has no key %q", k)
		}
	}
	if got := totals["deadlines_missed"]; got != 2.0 {
		t.Errorf("totals.deadlines_missed = %v, want 2", got)
	}
	if got := projects[0].(map[string]any)["resource_share"]; got != 0.5 {
		t.Errorf("projects[0].resource_share = %v, want 0.5", got)
	}
}

// svgElements counts the elements of an SVG by name and class, failing the
// test if it is not well-formed XML.
func svgElements(t *testing.T, data []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return counts
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, data)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			for _, a := range se.Attr {
				if a.Name.Local == "class" {
					counts[se.Name.Local+"."+a.Value]++
				}
			}
		}
	}
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	full := sampleReport(t)
	empty := NewRecorder([]string{"a", "b"}, 60).Report(Report{})
	short := NewRecorder([]string{"x"}, 1)
	short.CPU(0, 30, 1)
	tests := []struct {
		name      string
		report    Report
		polylines int // per class
		dashed    int
	}{
		{"two days, three projects", full, 3, 3},
		{"nothing recorded", empty, 0, 2},
		{"a short live run", short.Report(Report{Clock: "real", DurationSeconds: 45}), 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := tt.report.WriteSVG(&buf); err != nil {
				t.Fatalf("WriteSVG: %v", err)
			}
			c := svgElements(t, buf.Bytes())
			if c["svg"] != 1 || c["polyline.cumulative"] != tt.polylines || c["polyline.interval"] != tt.polylines ||
				c["line.resource-share"] != tt.dashed {
				t.Errorf("SVG has %d svg, %d cumulative and %d interval polylines, %d resource-share lines; want 1, %d, %d, %d",
					c["svg"], c["polyline.cumulative"], c["polyline.interval"], c["line.resource-share"],
					tt.polylines, tt.polylines, tt.dashed)
			}
			if strings.Contains(buf.String(), "NaN") || strings.Contains(buf.String(), "Inf") {
				t.Errorf("SVG holds a NaN or Inf coordinate:\n%s", buf.String())
			}
		})
	}
	var buf bytes.Buffer
	if err := full.WriteSVG(&buf); err != nil {
		t.Fatalf("WriteSVG: %v", err)
	}
	if !strings.Contains(buf.String(), "&lt;b&amp;&#34;eta&#34;&gt;") || !strings.Contains(buf.String(), "hours since start") {
		t.Errorf("SVG lacks the escaped project name or the hour axis:\n%s", buf.String())
	}
}

func TestTimeTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		end      float64
		step     float64
		unitName string
	}{
		{45, 5, "seconds"},
		{600, 60, "minutes"},
		{3600, 300, "minutes"},
		{2.5 * 3600, 900, "hours"},
		{48 * 3600, 6 * 3600, "hours"},
		{30 * 86400, 7 * 86400, "hours"},
		{3e9, 28 * 86400 * 128, "hours"},
	}
	for _, tt := range tests {
		step, _, unitName := timeTicks(tt.end)
		if step != tt.step || unitName != tt.unitName {
			t.Errorf("timeTicks(%v) = %v %s, want %v %s", tt.end, step, unitName, tt.step, tt.unitName)
		}
		if tt.end/step > maxXTicks {
			t.Errorf("timeTicks(%v) = %v: %v ticks, more than %d", tt.end, step, tt.end/step, maxXTicks)
		}
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := sampleReport(t).WriteText(&buf); err != nil {
		t.Fatalf("WriteText: %v", err)
	}
	out := buf.String()
	for _, want := range []string{
		"simulated clock, scenario reference <test>, strategy edf (runtime average)",
		"2 hosts, 4 CPUs, 2.00 days covered",
		"resource share", "achieved share", "deadlines missed",
		"alpha", "50.0%", "<b&\"eta\">", "30.0%", "gamma", "20.0%",
		"deadlines missed    2",
		"scheduler RPCs      48 (7 failed)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// The table is aligned: every row ends its last column at the same place.
	lines := strings.Split(out, "\n")
	var width int
	for _, l := range lines[3:8] { // header, three projects, total
		if width == 0 {
			width = len(l)
		}
		if len(l) != width {
			t.Errorf("table row %q is %d wide, the header %d", l, len(l), width)
		}
	}
}

func TestWriteDirAndReadFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sim-report", "nested")
	rep := sampleReport(t)
	if err := rep.WriteDir(dir); err != nil {
		t.Fatalf("WriteDir(%s): %v", dir, err)
	}
	// Written twice: the second write replaces the files in place.
	if err := rep.WriteDir(dir); err != nil {
		t.Fatalf("WriteDir(%s) again: %v", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{JSONFile, TextFile, SVGFile}; !sameSet(names, want) {
		t.Errorf("%s holds %v, want exactly %v (no temporary files left)", dir, names, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || !bytes.Contains(data, []byte("\n  \"projects\": [")) {
		t.Errorf("report.json is not indented with a trailing newline:\n%.200s", data)
	}
	got, err := ReadFile(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if !reflect.DeepEqual(got, rep) {
		t.Errorf("ReadFile gave back\n%+v\nwant\n%+v", got, rep)
	}
}

func TestReadFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) error %v, want fs.ErrNotExist", err)
	}
	var syntax *json.SyntaxError
	if _, err := ReadFile(bad); !errors.As(err, &syntax) {
		t.Errorf("ReadFile(bad) error %v, want a *json.SyntaxError", err)
	}
}

func TestWriteDirFailsOnAFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sampleReport(t).WriteDir(file); err == nil {
		t.Errorf("WriteDir(%s) where a file is: no error, want one", file)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestFormatInterval(t *testing.T) {
	t.Parallel()
	tests := map[float64]string{3600: "1 h", 7200: "2 h", 5400: "90 min", 900: "15 min", 60: "1 min", 30: "30 s", 0.5: "0.5 s"}
	for s, want := range tests {
		if got := formatInterval(s); got != want {
			t.Errorf("formatInterval(%v) = %q, want %q", s, got, want)
		}
	}
}
