package simclient

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/state"
)

// syncBuffer is an io.Writer safe to read while the run writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLateHostStaysOfflineAndReturnsCorrectOutputAfterDeadline(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	const deadline = 300 * time.Millisecond
	f.set(func(f *fakeProject) { f.jobs, f.deadline = 1, deadline })
	opts := testOptions(f)
	opts.LateFrac = 1
	opts.LateBy = 100 * time.Millisecond
	// next_rpc_delay would bring an online host back at once; the late
	// host must ignore it while it holds the task.
	f.set(func(f *fakeProject) { f.nextRPCDelay = 0.01 })
	var acks syncBuffer
	opts.AckLog = &acks
	stop := startRun(t, opts)
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reqs := f.snapshotRequests()
	if len(reqs) < 2 || len(reqs[0].sent) != 1 {
		t.Fatalf("fake saw %d requests, the first sending %d results; want the task sent by the first", len(reqs), len(reqs[0].sent))
	}
	if r := reqs[1]; len(r.req.Results) != 1 || r.req.Results[0].Name != "wu_0_0" {
		t.Fatalf("second request reports %+v, want wu_0_0: a late host makes no RPC while it holds work", r.req.Results)
	}
	due := time.Unix(0, int64(f.deadlines[0]*1e9)).Add(opts.LateBy)
	if reqs[1].at.Before(due) {
		t.Errorf("wu_0_0 reported at %s, want no earlier than its deadline plus late-by, %s", reqs[1].at.Format(time.StampMicro), due.Format(time.StampMicro))
	}
	if up := f.uploadTimes["wu_0_0_0"]; up.Before(due) {
		t.Errorf("wu_0_0_0 uploaded at %s, want after %s: the host was offline until then", up.Format(time.StampMicro), due.Format(time.StampMicro))
	}
	if got, want := f.uploads["wu_0_0_0"].data, demoapp.SingleOutput("wu_0"); !bytes.Equal(got, want) {
		t.Errorf("late host uploaded %q, want the correct output %q", got, want)
	}
	if rep := reqs[1].req.Results[0]; rep.State != int(state.ClientFilesUploaded) || rep.ExitStatus != 0 {
		t.Errorf("late report state=%d exit_status=%d, want 5 and 0", rep.State, rep.ExitStatus)
	}
	if s.ResultsLate != 1 || s.HostsByKind["late"] != 1 || s.ByKind["late"].Acked != 1 {
		t.Errorf("stats late=%d hosts_by_kind=%v by_kind=%v, want 1 late result of the one late host, acked", s.ResultsLate, s.HostsByKind, s.ByKind)
	}
	if got := acks.String(); got != "wu_0_0 late success late\n" {
		t.Errorf("ack log = %q, want %q", got, "wu_0_0 late success late\n")
	}
}

func TestAckLogAndDomainNameSayEachHostsKind(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = 4 })
	opts := testOptions(f)
	opts.Hosts, opts.FailFrac, opts.CheatFrac = 3, 1.0/3, 1.0/3
	var acks syncBuffer
	opts.AckLog = &acks
	stop := startRun(t, opts)
	f.waitFor(t, "four acked results", func(f *fakeProject) bool {
		n := 0
		for _, r := range f.requests {
			n += len(r.acked)
		}
		return n == 4
	})
	// The fake has acked; the hosts log an ack when they apply the reply.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(acks.String(), "\n") < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()

	kindOf := map[int64]string{} // host id -> kind, from the domain name
	for _, r := range f.snapshotRequests() {
		if r.req.HostID == 0 {
			continue
		}
		dn := r.req.HostInfo.DomainName
		i := strings.LastIndexByte(dn, '.')
		if !strings.HasPrefix(dn, "simhost") || i < 0 {
			t.Fatalf("domain name %q, want simhost<index>.<kind>", dn)
		}
		kindOf[r.req.HostID] = dn[i+1:]
	}
	byName := map[string]string{} // result -> kind of the host that got it
	for _, r := range f.snapshotRequests() {
		for _, name := range r.sent {
			byName[name] = kindOf[r.req.HostID]
		}
	}
	lines := strings.Split(strings.TrimSuffix(acks.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("ack log = %q, want 4 lines", acks.String())
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) != 4 {
			t.Fatalf("ack log line %q, want 4 fields", line)
		}
		name, kind, outcome, when := fields[0], fields[1], fields[2], fields[3]
		wantOutcome := "success"
		if kind == "failing" {
			wantOutcome = "error"
		}
		if byName[name] != "" && kind != byName[name] || outcome != wantOutcome || when != "on_time" {
			t.Errorf("ack log line %q, want %s %s %s on_time (host kind from its domain name)", line, name, byName[name], wantOutcome)
		}
	}
}

func TestCheatersNeverAgreeWithEachOtherOrTheTruth(t *testing.T) {
	t.Parallel()
	opts := Options{Seed: 1, SchedulerURL: "http://x/", Authenticators: []string{"k"}}.withDefaults()
	r := &runner{opts: opts, projects: opts.projects()}
	job := &task{files: demoapp.GeneratedFiles("wu_x"), rounds: demoapp.Rounds}
	correct := string(demoapp.Output("wu_x"))
	seen := map[string]int{correct: -1}
	for i := range 200 {
		// The same seed for every host: uniqueness must not rest on luck.
		h := newHost(r, i, KindCheating, newTestRand())
		outB, _ := h.compute(job)
		out := string(outB)
		if j, dup := seen[out]; dup {
			t.Fatalf("cheating host %d computed the same output as host %d (-1: the correct one)", i, j)
		}
		seen[out] = i
	}
	empty := &task{files: demoapp.Files{nil}, rounds: demoapp.Rounds}
	got, _ := newHost(r, 0, KindCheating, newTestRand()).compute(empty)
	if other, _ := newHost(r, 1, KindCheating, newTestRand()).compute(empty); string(got) == string(other) {
		t.Errorf("two cheaters agree on an empty input: %q", got)
	}
}

func TestDomainName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		index int
		kind  Kind
		want  string
	}{
		{0, KindNormal, "simhost0.normal"},
		{7, KindCheating, "simhost7.cheating"},
		{12, KindLate, "simhost12.late"},
	} {
		if got := DomainName(tc.index, tc.kind); got != tc.want {
			t.Errorf("DomainName(%d, %s) = %q, want %q", tc.index, tc.kind, got, tc.want)
		}
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 1)) }
