package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// addApp adds an app with one version on the fixture's platform and
// republishes the tables; it returns the app's id.
func (f *fixture) addApp(name string, beta bool) int64 {
	f.t.Helper()
	pid := int64(f.count(`SELECT id FROM platform WHERE name = ?`, platformName))
	id := storetest.App(f.t, f.st, storetest.AppOptions{CreateTime: 1, Name: name, UserFriendlyName: name, Weight: 1, Beta: beta}).ID
	storetest.AppVersion(f.t, f.st, storetest.AppVersionOptions{CreateTime: 1, App: id, VersionNum: 100, Platform: pid})
	f.publishTables()
	return id
}

// addJobOf is addJob for another app than the fixture's.
func (f *fixture) addJobOf(appID int64, name string, j job) (int64, []int64) {
	f.t.Helper()
	demo := f.appID
	f.appID = appID
	defer func() { f.appID = demo }()
	return f.addJob(name, j)
}

// setPrefs stores a user's project preferences document.
func (f *fixture) setPrefs(u row.User, doc string) {
	f.t.Helper()
	if err := f.st.UserSetProjectPrefs(f.ctx, u.ID, doc); err != nil {
		f.t.Fatal(err)
	}
}

// setVersionBeta marks an app version beta (or not) and republishes.
func (f *fixture) setVersionBeta(avID int64, beta bool) {
	f.t.Helper()
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE app_version SET beta = ? WHERE id = ?`, beta, avID); err != nil {
		f.t.Fatal(err)
	}
	f.publishTables()
}

func appsOf(f *fixture, rep *protocol.SchedulerReply) []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, strings.SplitN(r.Name, "_", 2)[0])
	}
	slices.Sort(out)
	return out
}

// TestSelectedAppsThenOthers: a volunteer who selected app A gets only A
// while A has work; when it has none they get B only if their preferences
// accept other apps, and the reply says why.
func TestSelectedAppsThenOthers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := f.addApp("bapp", false)
	f.addJob("a1", job{})
	f.addJob("a2", job{})
	f.addJobOf(b, "b1", job{})
	f.addJobOf(b, "b2", job{})
	f.setPrefs(f.user, fmt.Sprintf("<project_preferences><project_specific><app_id>%d</app_id></project_specific></project_preferences>", f.appID))

	rep := f.rpc(request{workSecs: 1e4, instances: 4, ncpus: 4})
	if got := appsOf(f, rep); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("selected A, A has work: got %v (%q), want a1 and a2 only", got, messages(rep))
	}
	host := rep.HostID
	held := []string{"a1_0", "a2_0"}

	before := f.shortfall(reasonNotSelected)
	rep = f.rpc(request{hostID: host, seqno: 1, workSecs: 1e4, instances: 4, ncpus: 4, other: held})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "No tasks are available for the applications you have selected") {
		t.Fatalf("selected A, A has none, others not accepted: got %v (%q), want nothing and the message", resultNames(rep), messages(rep))
	}
	if got := f.shortfall(reasonNotSelected); got != before+1 {
		t.Fatalf("send_shortfall_total{not_selected} = %v, want %v", got, before+1)
	}

	f.setPrefs(f.user, fmt.Sprintf("<project_preferences><project_specific><app_id>%d</app_id>"+
		"<allow_non_preferred_apps>1</allow_non_preferred_apps></project_specific></project_preferences>", f.appID))
	rep = f.rpc(request{hostID: host, seqno: 2, workSecs: 1e4, instances: 4, ncpus: 4, other: held})
	if got := appsOf(f, rep); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("selected A, A has none, others accepted: got %v (%q), want b1 and b2", got, messages(rep))
	}
	if !strings.Contains(messages(rep), "Sending tasks from other applications") {
		t.Errorf("second pass: messages %q, want BOINC's notice that other apps are sent", messages(rep))
	}

	// A has work again: the first pass takes it, and other apps wait.
	f.addJob("a3", job{})
	f.addJobOf(b, "b3", job{})
	rep = f.rpc(request{hostID: host, seqno: 3, workSecs: 1e4, instances: 4, ncpus: 4,
		other: append(held, "b1_0", "b2_0")})
	if got := appsOf(f, rep); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("A has work again: got %v (%q), want a3 only", got, messages(rep))
	}
}

// TestBetaWork: a beta app is sent only to volunteers who opted in; a
// volunteer who did not gets the app's best version that is not a beta.
func TestBetaWork(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pid := int64(f.count(`SELECT id FROM platform WHERE name = ?`, platformName))
	storetest.AppVersion(f.t, f.st, storetest.AppVersionOptions{CreateTime: 1, App: f.appID, VersionNum: 200, Platform: pid, Beta: true})
	beta := f.addApp("betaapp", true)
	f.publishTables()
	f.addJob("a1", job{})
	f.addJobOf(beta, "beta1", job{})
	tester := f.newUser("tester")
	f.setPrefs(tester, "<project_preferences><allow_beta_work>1</allow_beta_work></project_preferences>")

	rep := f.rpc(request{workSecs: 1e4, instances: 4, ncpus: 4})
	if got := appsOf(f, rep); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("no beta opt-in: got %v (%q), want a1 only", got, messages(rep))
	}
	if len(rep.AppVersions) != 1 || rep.AppVersions[0].VersionNum != 100 {
		t.Fatalf("no beta opt-in: versions %+v, want 100 (200 is a beta)", rep.AppVersions)
	}

	f.addJob("a2", job{})
	rep = f.rpc(request{auth: tester.Authenticator, workSecs: 1e4, instances: 4, ncpus: 4})
	if got := appsOf(f, rep); !slices.Equal(got, []string{"a2", "beta1"}) {
		t.Fatalf("beta opt-in: got %v (%q), want a2 and beta1", got, messages(rep))
	}
	for _, v := range rep.AppVersions {
		if v.AppName == "demo" && v.VersionNum != 200 {
			t.Fatalf("beta opt-in: demo sent with version %d, want the beta 200", v.VersionNum)
		}
	}
	if !strings.Contains(rep.ProjectPreferences.Inner, "<allow_beta_work>1</allow_beta_work>") {
		t.Errorf("reply project_preferences = %q, want the stored document", rep.ProjectPreferences.Inner)
	}
}

// TestAppInProgressLimit: --app-max-in-progress bounds one app's tasks on
// a host while others still go.
func TestAppInProgressLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.AppMaxInProgress = map[string]int{"demo": 2} })
	b := f.addApp("bapp", false)
	for i := range 4 {
		f.addJob(fmt.Sprintf("a%d", i), job{})
		f.addJobOf(b, fmt.Sprintf("b%d", i), job{})
	}
	rep := f.rpc(request{workSecs: 1e5, instances: 8, ncpus: 8})
	var a, bs int
	for _, app := range appsOf(f, rep) {
		if strings.HasPrefix(app, "a") {
			a++
		} else {
			bs++
		}
	}
	if a != 2 || bs != 4 {
		t.Fatalf("demo limited to 2: got %v (%q), want 2 of demo and the 4 of bapp", appsOf(f, rep), messages(rep))
	}
	var held []string
	for _, r := range rep.Results {
		held = append(held, r.Name)
	}
	rep = f.rpc(request{hostID: rep.HostID, seqno: 1, workSecs: 1e5, instances: 8, ncpus: 8, other: held})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "limit of tasks in progress for the available application") {
		t.Fatalf("demo at its limit: got %v (%q), want nothing and the message", resultNames(rep), messages(rep))
	}
}

// TestProjectPreferencesInReply: the reply carries the stored document as
// BOINC does (the client reads its resource opt-outs from it); a user
// without one gets none, and a malformed one is not sent.
func TestProjectPreferencesInReply(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if rep := f.rpc(request{}); rep.ProjectPreferences.Inner != "" {
		t.Fatalf("no preferences stored: reply has %q", rep.ProjectPreferences.Inner)
	}
	f.setPrefs(f.user, "<project_preferences>\n<no_cuda>1</no_cuda>\n<resource_share>50</resource_share>\n</project_preferences>\n")
	if rep := f.rpc(request{}); rep.ProjectPreferences.Inner != "<no_cuda>1</no_cuda>\n<resource_share>50</resource_share>" {
		t.Fatalf("reply project_preferences = %q, want the stored document's inside", rep.ProjectPreferences.Inner)
	}
	f.setPrefs(f.user, "<project_preferences></project_preferences>")
	if rep := f.rpc(request{}); strings.TrimSpace(rep.ProjectPreferences.Inner) != "" {
		t.Fatalf("empty document: reply has %q, want an empty element", rep.ProjectPreferences.Inner)
	}
	f.setPrefs(f.user, "<project_preferences><no_cuda>1</project_preferences>")
	if rep := f.rpc(request{}); rep.ProjectPreferences.Inner != "" {
		t.Fatalf("malformed document: reply has %q, want none", rep.ProjectPreferences.Inner)
	}
}
