package projectprefs

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, venue string
		want             Prefs
	}{
		{name: "empty is no preferences", doc: "", want: Prefs{}},
		{name: "BOINC web form layout",
			doc: `<project_preferences>
<resource_share>100</resource_share>
<allow_beta_work>1</allow_beta_work>
<no_cuda>1</no_cuda>
<project_specific>
<apps_selected>
<app_id>3</app_id>
<app_id>5</app_id>
</apps_selected>
<allow_non_preferred_apps>1</allow_non_preferred_apps>
<max_jobs>4</max_jobs>
<max_cpus>2</max_cpus>
<color>blue</color>
</project_specific>
</project_preferences>`,
			want: Prefs{Apps: []int64{3, 5}, AllowNonSelected: true, AllowBeta: true,
				NoResource: []string{protocol.ResourceNVIDIA}, MaxJobs: 4, MaxCPUs: 2}},
		{name: "app ids at the top level, flags false",
			doc:  `<project_preferences><app_id>7</app_id><allow_beta_work>0</allow_beta_work><no_cpu>0</no_cpu></project_preferences>`,
			want: Prefs{Apps: []int64{7}}},
		{name: "empty element is true, as parse_bool",
			doc:  `<project_preferences><allow_beta_work/><no_cpu/></project_preferences>`,
			want: Prefs{AllowBeta: true, NoResource: []string{protocol.ResourceCPU}}},
		{name: "every resource element",
			doc: `<project_preferences><no_cpu>1</no_cpu><no_cuda>1</no_cuda><no_ati>1</no_ati>` +
				`<no_intel_gpu>1</no_intel_gpu><no_apple_gpu>1</no_apple_gpu><no_rsc>miner_asic</no_rsc></project_preferences>`,
			want: Prefs{NoResource: []string{protocol.ResourceCPU, protocol.ResourceNVIDIA, protocol.ResourceAMD,
				protocol.ResourceIntel, protocol.ResourceApple, "miner_asic"}}},
		{name: "no_gpus",
			doc:  `<project_preferences><no_gpus>1</no_gpus></project_preferences>`,
			want: Prefs{NoGPUs: true}},
		{name: "bad app ids are skipped, duplicates counted once",
			doc:  `<project_preferences><app_id>x</app_id><app_id>-1</app_id><app_id>2</app_id><app_id>2</app_id></project_preferences>`,
			want: Prefs{Apps: []int64{2}}},
		{name: "another venue is ignored",
			doc:  `<project_preferences><app_id>1</app_id><venue name="work"><app_id>2</app_id><allow_beta_work>1</allow_beta_work></venue></project_preferences>`,
			want: Prefs{Apps: []int64{1}}},
		{name: "the host's venue replaces the rest",
			doc:   `<project_preferences><app_id>1</app_id><venue name="work"><project_specific><app_id>2</app_id></project_specific><allow_beta_work>1</allow_beta_work></venue></project_preferences>`,
			venue: "work",
			want:  Prefs{Apps: []int64{2}, AllowBeta: true}},
		{name: "a venue the document lacks uses the rest",
			doc:   `<project_preferences><app_id>1</app_id></project_preferences>`,
			venue: "school",
			want:  Prefs{Apps: []int64{1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.doc, tc.venue)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got.top, got.specific = nil, nil
			if !equal(got, tc.want) {
				t.Errorf("Parse(%q, %q) = %+v, want %+v", tc.doc, tc.venue, got, tc.want)
			}
		})
	}
}

func equal(a, b Prefs) bool {
	return slices.Equal(a.Apps, b.Apps) && a.AllowNonSelected == b.AllowNonSelected && a.AllowBeta == b.AllowBeta &&
		slices.Equal(a.NoResource, b.NoResource) && a.NoGPUs == b.NoGPUs && a.MaxJobs == b.MaxJobs && a.MaxCPUs == b.MaxCPUs
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	if _, err := Parse("<project_preferences><app_id>1</project_preferences>", ""); !errors.Is(err, ErrSyntax) {
		t.Errorf("Parse(malformed) = %v, want ErrSyntax", err)
	}
}

// TestFormatKeepsUnknown checks that rewriting the preferences changes only
// what this package manages: the resource share, project-specific
// settings and venues are written back as they were, and the result reads
// back as the preferences written.
func TestFormatKeepsUnknown(t *testing.T) {
	t.Parallel()
	doc := `<project_preferences>
<resource_share>250</resource_share>
<no_cuda>1</no_cuda>
<project_specific><app_id>1</app_id><color shade="dark">blue &amp; green</color></project_specific>
<venue name="home"><resource_share>5</resource_share></venue>
</project_preferences>`
	p, err := Parse(doc, "")
	if err != nil {
		t.Fatal(err)
	}
	p.Apps = []int64{4, 9}
	p.AllowNonSelected = true
	p.AllowBeta = true
	p.NoResource = []string{protocol.ResourceAMD, "fpga"}
	p.MaxJobs = 3
	out := Format(p)
	for _, want := range []string{"<resource_share>250</resource_share>", `<color shade="dark">blue &amp; green</color>`,
		`<venue name="home"><resource_share>5</resource_share></venue>`, "<no_ati>1</no_ati>", "<no_rsc>fpga</no_rsc>",
		"<app_id>4</app_id>", "<app_id>9</app_id>", "<allow_non_preferred_apps>1</allow_non_preferred_apps>",
		"<allow_beta_work>1</allow_beta_work>", "<max_jobs>3</max_jobs>"} {
		if !strings.Contains(out, want) {
			t.Errorf("Format: %q missing from\n%s", want, out)
		}
	}
	for _, gone := range []string{"<no_cuda>", "<app_id>1</app_id>"} {
		if strings.Contains(out, gone) {
			t.Errorf("Format: %q should be gone from\n%s", gone, out)
		}
	}
	back, err := Parse(out, "")
	if err != nil {
		t.Fatalf("Parse(Format(p)): %v\n%s", err, out)
	}
	if !equal(back, p) {
		t.Errorf("Parse(Format(p)) = %+v, want %+v", back, p)
	}
	if again := Format(back); again != out {
		t.Errorf("Format is not stable:\n%s\nthen\n%s", out, again)
	}
}

func TestFormatEmpty(t *testing.T) {
	t.Parallel()
	if got := Format(Prefs{}); strings.TrimSpace(got) != "<project_preferences>\n</project_preferences>" {
		t.Errorf("Format(Prefs{}) = %q, want an empty document", got)
	}
}

func TestInner(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"": "",
		"<project_preferences>\n<a>1</a>\n</project_preferences>\n": "<a>1</a>",
		"<a>1</a>": "<a>1</a>",
	} {
		if got := Inner(doc); got != want {
			t.Errorf("Inner(%q) = %q, want %q", doc, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	appA, appB := row.App{ID: 1}, row.App{ID: 2}
	betaApp := row.App{ID: 3, Beta: true}
	v, betaV := row.AppVersion{ID: 10}, row.AppVersion{ID: 11, Beta: true}
	cpu, nv := protocol.ResourceCPU, protocol.ResourceNVIDIA
	selectA := Prefs{Apps: []int64{1}}
	for _, tc := range []struct {
		name     string
		p        Prefs
		app      row.App
		av       row.AppVersion
		resource string
		pass     Pass
		want     Refusal
	}{
		{"no preferences: any app", Prefs{}, appB, v, cpu, FirstPass, Allowed},
		{"selected app", selectA, appA, v, cpu, FirstPass, Allowed},
		{"other app in the first pass", selectA, appB, v, cpu, FirstPass, NotSelected},
		{"other app in the other-apps pass", Prefs{Apps: []int64{1}, AllowNonSelected: true}, appB, v, cpu, OtherApps, Allowed},
		{"beta app without opt-in", Prefs{}, betaApp, v, cpu, FirstPass, Beta},
		{"beta version without opt-in", Prefs{}, appA, betaV, cpu, FirstPass, Beta},
		{"beta app with opt-in", Prefs{AllowBeta: true}, betaApp, betaV, cpu, FirstPass, Allowed},
		{"beta is refused in the other-apps pass too", Prefs{Apps: []int64{1}, AllowNonSelected: true}, betaApp, v, cpu, OtherApps, Beta},
		{"CPU opted out", Prefs{NoResource: []string{cpu}}, appA, v, cpu, FirstPass, ResourceOff},
		{"NVIDIA opted out, CPU allowed", Prefs{NoResource: []string{nv}}, appA, v, cpu, FirstPass, Allowed},
		{"NVIDIA opted out", Prefs{NoResource: []string{nv}}, appA, v, nv, FirstPass, ResourceOff},
		{"no_gpus refuses GPUs", Prefs{NoGPUs: true}, appA, v, protocol.ResourceAMD, FirstPass, ResourceOff},
		{"no_gpus refuses other coprocessors", Prefs{NoGPUs: true}, appA, v, "fpga", FirstPass, ResourceOff},
		{"no_gpus keeps the CPU", Prefs{NoGPUs: true}, appA, v, cpu, FirstPass, Allowed},
		{"not selected wins over beta", selectA, betaApp, v, cpu, FirstPass, NotSelected},
	} {
		if got := tc.p.Check(tc.app, tc.av, tc.resource, tc.pass); got != tc.want {
			t.Errorf("%s: Check = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOtherAppsPass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Prefs
		want bool
	}{
		{Prefs{}, false},
		{Prefs{AllowNonSelected: true}, false}, // every app is in the first pass already
		{Prefs{Apps: []int64{1}}, false},
		{Prefs{Apps: []int64{1}, AllowNonSelected: true}, true},
	} {
		if got := tc.p.OtherAppsPass(); got != tc.want {
			t.Errorf("%+v.OtherAppsPass() = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestCPUs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ maxCPUs, ncpus, want int }{{0, 8, 8}, {2, 8, 2}, {16, 8, 8}, {0, 0, 1}, {2, 0, 1}} {
		if got := (Prefs{MaxCPUs: tc.maxCPUs}).CPUs(tc.ncpus); got != tc.want {
			t.Errorf("Prefs{MaxCPUs: %d}.CPUs(%d) = %d, want %d", tc.maxCPUs, tc.ncpus, got, tc.want)
		}
	}
}

// TestFormatClearsSelection: the selection BOINC's web form wrote
// (<apps_selected> in <project_specific>) is replaced, not kept beside the
// new one, so clearing it sends every app again.
func TestFormatClearsSelection(t *testing.T) {
	t.Parallel()
	doc := `<project_preferences><project_specific><apps_selected><app_id>3</app_id></apps_selected>` +
		`<max_jobs>2</max_jobs><color>red</color></project_specific></project_preferences>`
	p, err := Parse(doc, "")
	if err != nil {
		t.Fatal(err)
	}
	p.Apps, p.MaxJobs = nil, 0
	out := Format(p)
	back, err := Parse(out, "")
	if err != nil || len(back.Apps) != 0 || back.MaxJobs != 0 || !strings.Contains(out, "<color>red</color>") {
		t.Fatalf("cleared selection and max_jobs: Parse(Format) = %+v, %v\n%s", back, err, out)
	}
	p.Apps = []int64{4}
	if out := Format(p); !strings.Contains(out, "<apps_selected>\n<app_id>4</app_id>\n</apps_selected>") {
		t.Fatalf("Format writes the selection in <apps_selected>:\n%s", out)
	}
}
