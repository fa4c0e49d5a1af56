package taskctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// explainProject is a project with one host holding one task, and three
// unsent jobs: one needing more memory than the host has, two that fit.
type explainProject struct {
	host   int64
	unsent []store.UnsentResult
}

func prepareExplain(t *testing.T, b *bundle) explainProject {
	t.Helper()
	pid := storetest.Platform(t, b.st, storetest.PlatformOptions{CreateTime: 1, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux"}).ID
	app := storetest.App(t, b.st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	av := storetest.AppVersion(t, b.st, storetest.AppVersionOptions{CreateTime: 1, App: app, VersionNum: 100, Platform: pid}).ID
	user := storetest.User(t, b.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "a", Authenticator: "0123456789abcdef"}).ID
	var p explainProject
	p.host = storetest.Host(t, b.st, storetest.HostOptions{CreateTime: 1, User: user, PNCPUs: 1, PFpops: 1e9, MNbytes: 2e9,
		DFree: 1e10, OSName: "Linux Debian"}).ID
	job := func(name string, memory float64, st state.ServerState, host int64) {
		wu := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: 1, App: app, Name: name, XMLDoc: "<workunit/>",
			RscFpopsEst: 1e10, RscFpopsBound: 1e11, RscMemoryBound: memory, DelayBound: 3600,
			TransitionTime: state.NoTransition, MinQuorum: 1, TargetNResults: 1, MaxErrorResults: 3, MaxTotalResults: 6,
			MaxSuccessResults: 3}).ID
		r := storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: st, Name: name + "_0", App: app}
		if host != 0 {
			r.Host, r.User, r.AppVersionID, r.AppVersionNum = host, user, av, 100
			r.SentTime, r.ReportDeadline = b.now.Unix()-60, b.now.Unix()+3600
		}
		id := storetest.Instance(t, b.st, r).ID
		if st == state.ServerUnsent {
			p.unsent = append(p.unsent, store.UnsentResult{ID: id, WorkunitID: wu, AppID: app, RscFpopsEst: 1e10,
				RscMemoryBound: memory, DelayBound: 3600})
		}
	}
	job("held", 0, state.ServerInProgress, p.host)
	job("big", 8e9, state.ServerUnsent, 0)
	job("fits", 0, state.ServerUnsent, 0)
	job("also", 0, state.ServerUnsent, 0)
	return p
}

// checksum sums the tables a send writes.
func checksum(t *testing.T, st *store.Store) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"result", "workunit", "host", "workunit_user"} {
		var name string
		var sum int64
		if err := st.DB().QueryRow("CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%d ", table, sum)
	}
	return b.String()
}

func TestHostExplain(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	p := prepareExplain(t, b)
	host := strconv.FormatInt(p.host, 10)
	noCache := filepath.Join(t.TempDir(), "no-cache")
	before := checksum(t, b.st)

	// From the database: the platform is the one of the version it holds.
	out, errOut, err := b.run(t, "host", "explain", "--host", host, "--seconds", "15", "--shm-path", noCache)
	if err != nil {
		t.Fatalf("host explain: %v (stderr %q)", err, errOut)
	}
	t.Logf("host explain:\n%s", out)
	for _, want := range []string{
		"platforms x86_64-pc-linux-gnu",
		"1 tasks in progress of 4 allowed",
		"3 candidates from the database's unsent results",
		"would send 2; reasons for the rest: memory 1\n",
		"the request would be covered",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("host explain output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "no cache file") {
		t.Errorf("host explain stderr = %q, want a note that the cache is not used", errOut)
	}

	// One day of work, and no more than one task in progress: the limit.
	out = b.mustRun(t, "host", "explain", "--host", host, "--shm-path", noCache, "--json", "--max-in-progress-per-cpu", "1")
	var ex scheduler.Explanation
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("host explain --json: %v\n%s", err, out)
	}
	if ex.WouldSend != 0 || ex.Short != "in_progress_limit" || ex.Limit != 1 || ex.WorkSeconds != 86400 ||
		len(ex.Candidates) != 3 || ex.Candidates[0].Verdict != scheduler.VerdictNotReached {
		t.Fatalf("host explain --json with a limit of 1 = %+v; want nothing sent, in_progress_limit, 3 candidates not reached", ex)
	}

	// From the cache, read only: the same verdicts, no slot claimed.
	path := filepath.Join(t.TempDir(), "cache")
	c, err := shmcache.Create(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ps, _ := b.st.PlatformList(ctx)
	as, _ := b.st.AppList(ctx)
	vs, err := b.st.AppVersionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetTables(shmcache.Tables{Platforms: ps, Apps: as, AppVersions: vs}); err != nil {
		t.Fatal(err)
	}
	for i, r := range p.unsent {
		c.Fill(2*i+1, shmcache.Entry{ResultID: r.ID, WorkunitID: r.WorkunitID, AppID: r.AppID, RscFpopsEst: r.RscFpopsEst,
			RscMemoryBound: r.RscMemoryBound, DelayBound: r.DelayBound})
	}
	out = b.mustRun(t, "host", "explain", "--host", host, "--seconds", "15", "--shm-path", path, "--json")
	ex = scheduler.Explanation{}
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("host explain --json: %v\n%s", err, out)
	}
	var got []string
	for _, v := range ex.Candidates {
		got = append(got, fmt.Sprintf("%d:%s/%s", v.Slot, v.Verdict, v.Reason))
	}
	if want := "1:reject/memory 3:send/ 5:send/"; ex.Source != "cache" || strings.Join(got, " ") != want || ex.WouldSend != 2 {
		t.Fatalf("host explain from the cache = source %q, %v, would send %d; want cache, %s, 2", ex.Source, got, ex.WouldSend, want)
	}
	for i := range p.unsent {
		if st, _ := c.Slot(2*i + 1); st != shmcache.SlotPresent {
			t.Errorf("slot %d is %v after host explain, want PRESENT", 2*i+1, st)
		}
	}
	if after := checksum(t, b.st); after != before {
		t.Fatalf("host explain changed the database: %s, was %s", after, before)
	}

	// Bad input gets a clear error.
	if _, _, err := b.run(t, "host", "explain", "--host", "999999", "--shm-path", noCache); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("host explain for no such host: %v, want not found", err)
	}
	other := storetest.Host(t, b.st, storetest.HostOptions{CreateTime: 1, User: 1, PNCPUs: 1}).ID
	if _, _, err := b.run(t, "host", "explain", "--host", strconv.FormatInt(other, 10), "--shm-path", noCache); err == nil ||
		!strings.Contains(err.Error(), "--platform") {
		t.Errorf("host explain for a host never sent work: %v, want a hint to name --platform", err)
	}
}
