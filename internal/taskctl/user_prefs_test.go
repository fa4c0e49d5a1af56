package taskctl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/projectprefs"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestUserPrefs checks that taskctl user prefs writes BOINC's document,
// changes only the flags given, keeps what it does not manage, and that
// app add/set and app-version add set the beta flags.
func TestUserPrefs(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "alpha")
	b.mustRun(t, "app", "add", "--name", "gamma", "--beta")
	b.mustRun(t, "user", "create", "--email", "ann@example.org", "--name", "Ann")
	alpha, err := b.st.AppGetByName(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	gamma, err := b.st.AppGetByName(ctx, "gamma")
	if err != nil || !gamma.Beta || alpha.Beta {
		t.Fatalf("app add --beta: alpha %+v, gamma %+v, %v; want gamma beta only", alpha, gamma, err)
	}
	b.mustRun(t, "app", "set", "--name", "gamma", "--beta=false")
	if gamma, _ = b.st.AppGetByName(ctx, "gamma"); gamma.Beta {
		t.Fatalf("app set --beta=false left gamma beta")
	}

	if out := b.mustRun(t, "user", "prefs", "ann@example.org"); !strings.Contains(out, "apps: all\n") {
		t.Fatalf("user prefs of a volunteer with none = %q, want apps: all", out)
	}
	// Something a web form wrote, which the tool must keep.
	u, err := b.st.UserGetByEmail(ctx, "ann@example.org")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.st.UserSetProjectPrefs(ctx, u.ID,
		"<project_preferences><resource_share>50</resource_share><project_specific><color>red</color></project_specific></project_preferences>"); err != nil {
		t.Fatal(err)
	}
	out := b.mustRun(t, "user", "prefs", "--apps", "alpha,gamma", "--allow-other-apps", "--beta",
		"--no-gpu", "nvidia", "--no-gpu", "fpga", "--max-jobs", "6", "ann@example.org")
	if !strings.Contains(out, "apps: alpha,gamma\nallow_other_apps: true\nbeta: true\nnot_used: NVIDIA,fpga\nmax_jobs: 6\n") {
		t.Fatalf("user prefs output = %q", out)
	}
	u, _ = b.st.UserGetByEmail(ctx, "ann@example.org")
	doc := string(u.ProjectPrefs)
	for _, want := range []string{"<resource_share>50</resource_share>", "<color>red</color>", "<no_cuda>1</no_cuda>",
		"<no_rsc>fpga</no_rsc>", "<allow_beta_work>1</allow_beta_work>", "<allow_non_preferred_apps>1</allow_non_preferred_apps>"} {
		if !strings.Contains(doc, want) {
			t.Errorf("stored preferences lack %q:\n%s", want, doc)
		}
	}
	p, err := projectprefs.Parse(doc, "")
	if err != nil || len(p.Apps) != 2 || p.Apps[0] != alpha.ID || p.Apps[1] != gamma.ID || p.MaxJobs != 6 {
		t.Fatalf("stored preferences read as %+v, %v", p, err)
	}

	// Only the flags given change.
	b.mustRun(t, "user", "prefs", "--beta=false", "--no-gpu", "none", "--no-cpu", "ann@example.org")
	u, _ = b.st.UserGetByEmail(ctx, "ann@example.org")
	p, _ = projectprefs.Parse(string(u.ProjectPrefs), "")
	if p.AllowBeta || !p.AllowNonSelected || len(p.Apps) != 2 || len(p.NoResource) != 1 || p.NoResource[0] != protocol.ResourceCPU ||
		!strings.Contains(string(u.ProjectPrefs), "<color>red</color>") {
		t.Fatalf("after --beta=false --no-gpu none --no-cpu: %+v\n%s", p, u.ProjectPrefs)
	}
	if out := b.mustRun(t, "user", "prefs", "Ann"); !strings.Contains(out, "not_used: CPU\n") {
		t.Fatalf("user prefs by name = %q, want Ann's preferences", out)
	}
	b.mustRun(t, "user", "create", "--email", "ann2@example.org", "--name", "Ann")
	if _, _, err := b.run(t, "user", "prefs", "Ann"); err == nil || !strings.Contains(err.Error(), "several accounts") {
		t.Fatalf("user prefs by a name two accounts have = %v, want an error", err)
	}
	if _, _, err := b.run(t, "user", "prefs", "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("user prefs of no account = %v, want ErrNotFound", err)
	}
	if _, _, err := b.run(t, "user", "prefs", "--apps", "nosuch", "ann@example.org"); err == nil {
		t.Fatal("user prefs --apps with an unknown app succeeded, want an error")
	}

	platform := "x86_64-pc-linux-gnu"
	b.mustRun(t, "platform", "add", "--name", platform)
	b.mustRun(t, "app-version", "add", "--app", "alpha", "--platform", platform, "--version-num", "200", "--beta")
	vs, err := b.st.AppVersionList(ctx)
	if err != nil || len(vs) != 1 || !vs[0].Beta {
		t.Fatalf("app-version add --beta: %+v, %v; want one beta version", vs, err)
	}
}
