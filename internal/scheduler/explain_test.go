package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

var _ ExplainStore = (*store.Store)(nil)

// snapshot is what a dry run must leave as it found: the checksums and row
// counts of the tables a send writes, and every cache slot.
type snapshot struct {
	tables string
	slots  []string
}

func (f *fixture) snapshot() snapshot {
	f.t.Helper()
	var b strings.Builder
	for _, table := range []string{"result", "workunit", "host", "workunit_user", "user"} {
		var name string
		var sum *int64
		if err := f.st.DB().QueryRowContext(f.ctx, "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
			f.t.Fatalf("CHECKSUM TABLE %s: %v", table, err)
		}
		if sum == nil {
			f.t.Fatalf("CHECKSUM TABLE %s: no checksum", table)
		}
		fmt.Fprintf(&b, "%s=%d rows=%d ", table, *sum, f.count("SELECT COUNT(*) FROM "+table))
	}
	s := snapshot{tables: b.String()}
	for i := 0; i < f.feeder.NSlots(); i++ {
		st, e := f.feeder.Slot(i)
		s.slots = append(s.slots, fmt.Sprintf("%v %+v", st, e))
	}
	return s
}

func (f *fixture) shortfall(reason string) float64 {
	return testutil.ToFloat64(f.svc.m.shortfall.WithLabelValues(reason))
}

// TestShortfallReasons makes a request fall short for each reason the send
// decision has: the live request counts it in send_shortfall_total, and a
// dry run for the same host afterwards names the same reason, changing
// nothing in the database or the cache.
func TestShortfallReasons(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		opts   func(*Options)
		policy Policy
		// prepare sets the project up and returns the request to make.
		prepare func(f *fixture) request
		reason  string
		// sent is how many instances the live request gets.
		sent int
	}{
		{name: "wrong platform", reason: reasonPlatform, prepare: func(f *fixture) request {
			f.addJob("wu", job{})
			return request{workSecs: 100, instances: 1, platform: "windows_x86_64"}
		}},
		{name: "too little memory", reason: reasonMemory, prepare: func(f *fixture) request {
			f.addJob("wu", job{memory: 4e9})
			return request{workSecs: 100, instances: 1, memory: 1e9}
		}},
		{name: "too little disk", reason: reasonDisk, prepare: func(f *fixture) request {
			f.addJob("wu", job{disk: 5e9})
			return request{workSecs: 100, instances: 1, diskFree: 1e9}
		}},
		{name: "deadline not feasible", reason: reasonDeadline, prepare: func(f *fixture) request {
			f.addJob("wu", job{fpops: 1e13, delayBound: 3600}) // 10,000 s on 1 GFLOPS
			return request{workSecs: 100, instances: 1}
		}},
		{name: "one per user", reason: reasonOnePerUser, prepare: func(f *fixture) request {
			f.addJob("wu", job{instances: 2})
			f.sendTo(1) // alice's first computer
			return request{workSecs: 100, instances: 1}
		}},
		{name: "quarantined", reason: reasonQuarantined, opts: func(o *Options) { o.QuarantineStreak = 3 },
			policy: Policy{QuarantineStreak: 3}, prepare: func(f *fixture) request {
				f.addJob("wua", job{})
				host := f.sendTo(1)
				f.addJob("wub", job{})
				f.setHost(host, 0, 3, 0)
				return request{hostID: host, seqno: 1, workSecs: 1e4, instances: 1, other: []string{"wua_0"}}
			}},
		{name: "in-progress limit", reason: reasonInProgressLimit, opts: func(o *Options) { o.MaxInProgressPerCPU = 1 },
			policy: Policy{MaxInProgressPerCPU: 1}, prepare: func(f *fixture) request {
				f.addJob("wua", job{})
				host := f.sendTo(1) // wua_0: the walk starts at a random slot
				f.addJob("wub", job{})
				return request{hostID: host, seqno: 1, workSecs: 1e4, instances: 1, other: []string{"wua_0"}}
			}},
		{name: "reply full", reason: reasonRPCLimit, sent: 1, opts: func(o *Options) { o.MaxResultsPerRPC = 1 },
			policy: Policy{MaxResultsPerRPC: 1}, prepare: func(f *fixture) request {
				f.addJob("wua", job{})
				f.addJob("wub", job{})
				f.addJob("wuc", job{})
				return request{workSecs: 1e4, instances: 2}
			}},
		{name: "reliable only", reason: reasonReliableOnly, prepare: func(f *fixture) request {
			f.addJob("tail", job{sendFlags: row.SendReliableOnly})
			return request{workSecs: 100, instances: 1}
		}},
		{name: "homogeneous redundancy", reason: reasonHR, prepare: func(f *fixture) request {
			f.setAppPolicy("homogeneous_redundancy", hrFine)
			wu, _ := f.addJob("wu", job{instances: 2})
			// Bound to Linux/Intel since it was cached: the cache says 0.
			linux := hrClass(hrFine, "Linux Ubuntu", "GenuineIntel", linuxIntel)
			if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE workunit SET hr_class = ? WHERE id = ?`, linux, wu); err != nil {
				t.Fatal(err)
			}
			return request{workSecs: 100, instances: 1, osName: "Microsoft Windows 11", vendor: "AuthenticAMD", model: winAMD}
		}},
		{name: "app deprecated", reason: reasonAppDeprecated, prepare: func(f *fixture) request {
			old := storetest.App(f.t, f.st, storetest.AppOptions{CreateTime: 1, Name: "old", UserFriendlyName: "Old", Weight: 1}).ID
			pid := int64(f.count(`SELECT id FROM platform WHERE name = ?`, platformName))
			storetest.AppVersion(f.t, f.st, storetest.AppVersionOptions{CreateTime: 1, App: old, VersionNum: 1, Platform: pid})
			demo := f.appID
			f.appID = old
			f.addJob("wu", job{})
			f.setAppPolicy("deprecated", 1)
			f.appID = demo
			return request{workSecs: 100, instances: 1}
		}},
		{name: "app not selected", reason: reasonNotSelected, prepare: func(f *fixture) request {
			other := f.addApp("other", false)
			f.addJobOf(other, "wu", job{})
			f.setPrefs(f.user, fmt.Sprintf("<project_preferences><app_id>%d</app_id></project_preferences>", f.appID))
			return request{workSecs: 100, instances: 1}
		}},
		{name: "beta app", reason: reasonBeta, prepare: func(f *fixture) request {
			f.setAppPolicy("beta", 1)
			f.addJob("wu", job{})
			return request{workSecs: 100, instances: 1}
		}},
		{name: "beta version", reason: reasonBeta, prepare: func(f *fixture) request {
			f.setVersionBeta(f.avID, true)
			f.addJob("wu", job{})
			return request{workSecs: 100, instances: 1}
		}},
		{name: "CPU opted out", reason: reasonResourcePref, prepare: func(f *fixture) request {
			f.addJob("wu", job{})
			f.setPrefs(f.user, "<project_preferences><no_cpu>1</no_cpu></project_preferences>")
			return request{workSecs: 100, instances: 1}
		}},
		{name: "app in-progress limit", reason: reasonAppInProgress, opts: func(o *Options) { o.AppMaxInProgress = map[string]int{"demo": 1} },
			policy: Policy{AppMaxInProgress: map[string]int{"demo": 1}}, prepare: func(f *fixture) request {
				f.addJob("wua", job{})
				host := f.sendTo(1) // wua_0: the walk starts at a random slot
				f.addJob("wub", job{})
				return request{hostID: host, seqno: 1, workSecs: 1e4, instances: 1, other: []string{"wua_0"}}
			}},
		{name: "volunteer's max_jobs", reason: reasonPrefsInProgress, prepare: func(f *fixture) request {
			f.addJob("wua", job{})
			f.setPrefs(f.user, "<project_preferences><max_jobs>1</max_jobs></project_preferences>")
			host := f.sendTo(1) // wua_0: the walk starts at a random slot
			f.addJob("wub", job{})
			return request{hostID: host, seqno: 1, workSecs: 1e4, instances: 1, other: []string{"wua_0"}}
		}},
		{name: "empty cache", reason: reasonNoCachedWork, prepare: func(f *fixture) request {
			return request{workSecs: 100, instances: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mods []func(*Options)
			if c.opts != nil {
				mods = append(mods, c.opts)
			}
			f := setup(t, mods...)
			r := c.prepare(f)
			before := f.shortfall(c.reason)
			rep := f.rpc(r)
			if len(rep.Results) != c.sent {
				t.Fatalf("request: got %v (%q), want %d instances", resultNames(rep), messages(rep), c.sent)
			}
			if got := f.shortfall(c.reason); got != before+1 {
				t.Fatalf("send_shortfall_total{reason=%q} = %v after the request, want %v", c.reason, got, before+1)
			}
			if c.sent == 0 && testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(c.reason)) < 1 {
				t.Fatalf("no_work_total{reason=%q} not counted", c.reason)
			}

			platform := r.platform
			if platform == "" {
				platform = platformName
			}
			snap := f.snapshot()
			host := rep.HostID
			if host == 0 {
				host = r.hostID
			}
			ex, err := Explain(f.ctx, f.st, ExplainParams{HostID: host, Platforms: []string{platform},
				WorkSeconds: r.workSecs, Instances: r.instances, Cache: f.feeder, Now: f.now.Load(), Policy: c.policy})
			if err != nil {
				t.Fatalf("Explain: %v", err)
			}
			if ex.Short != c.reason || ex.ShortText == "" {
				t.Errorf("Explain: short %q (%q), want %q; candidates %+v", ex.Short, ex.ShortText, c.reason, ex.Candidates)
			}
			if after := f.snapshot(); after.tables != snap.tables || strings.Join(after.slots, "\n") != strings.Join(snap.slots, "\n") {
				t.Errorf("Explain changed the database or the cache:\nbefore %s\nafter  %s", snap.tables, after.tables)
			}
			if got := f.shortfall(c.reason); got != before+1 {
				t.Errorf("send_shortfall_total{reason=%q} = %v after the dry run, want it unchanged (%v)", c.reason, got, before+1)
			}
			// A candidate-level reason is the verdict on some candidate.
			switch c.reason {
			case reasonPlatform, reasonInProgressLimit, reasonQuarantined, reasonRPCLimit, reasonNoCachedWork, reasonPrefsInProgress,
				reasonBeta: // beta may be decided in the version choice, before any candidate
			default:
				if ex.Rejected[c.reason] == 0 {
					t.Errorf("Explain: no candidate rejected for %q: %+v", c.reason, ex.Candidates)
				}
			}
		})
	}
}

// TestExplainFromDatabase explains a host against the database's unsent
// instances when there is no cache, with the host's platforms taken from
// the work it was sent.
func TestExplainFromDatabase(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("first", job{})
	host := f.sendTo(1)
	f.addJob("big", job{memory: 8e9})
	f.addJob("fits", job{})
	f.addJob("also", job{instances: 2})
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE host SET m_nbytes = 2e9, p_ncpus = 1 WHERE id = ?`, host); err != nil {
		t.Fatal(err)
	}
	snap := f.snapshot()
	ex, err := Explain(f.ctx, f.st, ExplainParams{HostID: host, WorkSeconds: 15, Instances: 1, Now: f.now.Load()})
	if err != nil {
		t.Fatal(err)
	}
	if f.snapshot().tables != snap.tables {
		t.Fatal("Explain changed the database")
	}
	if ex.Source != "database" || len(ex.Platforms) != 1 || ex.Platforms[0] != platformName || ex.InProgress != 1 {
		t.Fatalf("Explain = source %q, platforms %v, in progress %d; want database, [%s], 1", ex.Source, ex.Platforms,
			ex.InProgress, platformName)
	}
	var got []string
	for _, v := range ex.Candidates {
		got = append(got, v.Verdict+"/"+v.Reason)
	}
	// In id order: big (memory), fits (send, 10 s), also_0 (send: 20 s ≥
	// 15), also_1 (not reached: covered).
	want := []string{"reject/memory", "send/", "send/", "not_reached/covered"}
	if strings.Join(got, " ") != strings.Join(want, " ") || ex.WouldSend != 2 || ex.Short != "" {
		t.Fatalf("Explain verdicts = %v, would send %d, short %q; want %v, 2, none", got, ex.WouldSend, ex.Short, want)
	}

	// A host never sent anything has no known platform.
	rep := f.rpc(request{dontSend: true})
	if _, err := Explain(f.ctx, f.st, ExplainParams{HostID: rep.HostID, Now: f.now.Load()}); !errors.Is(err, ErrPlatformUnknown) {
		t.Fatalf("Explain for a host never sent work: %v, want ErrPlatformUnknown", err)
	}
	if _, err := Explain(f.ctx, f.st, ExplainParams{HostID: 1 << 30, Now: f.now.Load()}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Explain for no host: %v, want ErrNotFound", err)
	}
}

// TestShortfallReasonsPrecreated checks every reason is exported at 0
// before any request, so rate() and alerts see the series from the start.
func TestShortfallReasonsPrecreated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	n, err := testutil.GatherAndCount(f.reg, "taskserver_scheduler_send_shortfall_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(reasonText) || n < 14 {
		t.Fatalf("send_shortfall_total series = %d, want one per reason (%d)", n, len(reasonText))
	}
	for r := range noWorkText {
		if reasonText[r] == "" {
			t.Errorf("no_work reason %q has no shortfall text", r)
		}
	}
}

// TestShortfallNotCountedWhenCovered: a request that gets all it asked for
// counts no shortfall.
func TestShortfallNotCountedWhenCovered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("a", job{})
	f.addJob("b", job{})
	if rep := f.rpc(request{workSecs: 15, instances: 2}); len(rep.Results) != 2 {
		t.Fatalf("got %v, want 2", resultNames(rep))
	}
	for r := range reasonText {
		if got := f.shortfall(r); got != 0 {
			t.Errorf("send_shortfall_total{reason=%q} = %v after a covered request, want 0", r, got)
		}
	}
}
