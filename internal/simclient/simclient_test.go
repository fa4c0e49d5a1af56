package simclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ackedIn returns the index of the request whose reply acked name, or -1.
func ackedIn(reqs []fakeRequest, name string) int {
	for i, r := range reqs {
		if slices.Contains(r.acked, name) {
			return i
		}
	}
	return -1
}

// droppedAfterAck holds once a request after the one that acked name no
// longer mentions it.
func droppedAfterAck(name string) func(f *fakeProject) bool {
	return func(f *fakeProject) bool {
		i := ackedIn(f.requests, name)
		return i >= 0 && i+1 < len(f.requests)
	}
}

func TestHostRegistersFetchesComputesUploadsReportsAndForgetsAfterAck(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = 1 })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reqs := f.snapshotRequests()
	if reqs[0].req.HostID != 0 || reqs[0].req.RPCSeqno != 0 {
		t.Errorf("first request hostid=%d rpc_seqno=%d, want 0 and 0", reqs[0].req.HostID, reqs[0].req.RPCSeqno)
	}
	if reqs[1].req.HostID != 1 || reqs[1].req.RPCSeqno != 0 {
		t.Errorf("second request hostid=%d rpc_seqno=%d, want the assigned 1 and 0", reqs[1].req.HostID, reqs[1].req.RPCSeqno)
	}
	if len(reqs) > 2 && reqs[2].req.RPCSeqno != 1 {
		t.Errorf("third request rpc_seqno=%d, want 1", reqs[2].req.RPCSeqno)
	}
	first := reqs[0].req
	if first.Authenticator != "acct_key_1" || first.PlatformName != platformName || first.HostInfo.PNCPUs != 1 ||
		first.HostInfo.PFpops <= 0 || first.HostInfo.MNbytes <= 0 || first.HostInfo.DFree <= 0 {
		t.Errorf("first request authenticator=%q platform=%q p_ncpus=%d p_fpops=%g m_nbytes=%g d_free=%g, want the host described",
			first.Authenticator, first.PlatformName, first.HostInfo.PNCPUs, first.HostInfo.PFpops, first.HostInfo.MNbytes, first.HostInfo.DFree)
	}
	if first.WorkReqSeconds <= 0 || first.CPUReqSecs <= 0 || first.CPUReqInstances != 1 {
		t.Errorf("first request work_req_seconds=%g cpu_req_secs=%g cpu_req_instances=%g, want a work request for 1 idle CPU",
			first.WorkReqSeconds, first.CPUReqSecs, first.CPUReqInstances)
	}

	up, ok := f.uploads["wu_0_0_0"]
	if !ok {
		t.Fatalf("uploads = %v, want wu_0_0_0", f.uploads)
	}
	want := demoapp.SingleOutput("wu_0")
	if !bytes.Equal(up.data, want) {
		t.Errorf("uploaded wu_0_0_0 = %q, want demoapp.Output = %q", up.data, want)
	}
	// The fake reads the header with the data server's parser, which trims.
	if up.signature != "0123abcd\nef456789\n." || up.maxNbytes != "100000" || up.md5 != md5hex(want) {
		t.Errorf("upload header signature=%q max_nbytes=%q md5=%q, want the trimmed certificate, 100000, %s",
			up.signature, up.maxNbytes, up.md5, md5hex(want))
	}

	reps := reportsOf(reqs, "wu_0_0")
	if len(reps) != 1 {
		t.Fatalf("reports of wu_0_0 = %d, want exactly 1 (acked the first time)", len(reps))
	}
	r := reps[0]
	if r.State != int(state.ClientFilesUploaded) || r.ExitStatus != 0 || len(r.FileInfos) != 1 {
		t.Fatalf("report state=%d exit_status=%d file_infos=%d, want 5, 0, 1", r.State, r.ExitStatus, len(r.FileInfos))
	}
	fi := r.FileInfos[0]
	if fi.Name != "wu_0_0_0" || fi.Nbytes != float64(len(want)) || fi.MaxNbytes != 100000 || fi.MD5Cksum != md5hex(want) ||
		fi.UploadURL != f.srv.URL+"/file_upload_handler" {
		t.Errorf("reported file_info = %+v, want name wu_0_0_0, nbytes %d, max 100000, md5 %s and the upload url", fi, len(want), md5hex(want))
	}
	i := ackedIn(reqs, "wu_0_0")
	for _, later := range reqs[i+1:] {
		if mentions(later, "wu_0_0") {
			t.Errorf("a request after the ack still lists wu_0_0: %+v", later.req.Results)
		}
	}
	if s.ResultsReceived != 1 || s.ResultsComputed != 1 || s.ResultsUploaded != 1 || s.ResultsReported != 1 ||
		s.ResultsAcked != 1 || s.ResultRereports != 0 || s.RPCErrors != 0 {
		t.Errorf("stats = %+v, want 1 received, computed, uploaded, reported and acked; no re-reports or errors", s)
	}
}

func TestUnackedResultIsReportedAgainUntilAcked(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.withholdAcks = 1, 1 })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reqs := f.snapshotRequests()
	if n := len(reportsOf(reqs, "wu_0_0")); n != 2 {
		t.Errorf("reports of wu_0_0 = %d, want 2 (first not acked)", n)
	}
	if s.ResultsReported != 1 || s.ResultRereports != 1 || s.ResultsAcked != 1 {
		t.Errorf("stats reported=%d rereports=%d acked=%d, want 1, 1, 1", s.ResultsReported, s.ResultRereports, s.ResultsAcked)
	}
}

func TestCheaterUploadsPlausibleWrongOutput(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = 1 })
	opts := testOptions(f)
	opts.CheatFrac = 1
	stop := startRun(t, opts)
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	got, want := f.uploads["wu_0_0_0"].data, demoapp.SingleOutput("wu_0")
	if bytes.Equal(got, want) {
		t.Fatalf("cheater uploaded the correct output %q, want a wrong one", got)
	}
	prefix := want[:bytes.Index(want, []byte("digest "))+len("digest ")]
	if len(got) != len(want) || !bytes.HasPrefix(got, prefix) {
		t.Errorf("cheater uploaded %q, want the shape of %q (same length and lines, other digest)", got, want)
	}
	reps := reportsOf(f.snapshotRequests(), "wu_0_0")
	if len(reps) == 0 || reps[0].State != int(state.ClientFilesUploaded) || reps[0].ExitStatus != 0 {
		t.Errorf("cheater reports = %+v, want one success report", reps)
	}
	if s.ResultsCheated != 1 || s.HostsByKind["cheating"] != 1 {
		t.Errorf("stats cheated=%d hosts_by_kind=%v, want 1 and one cheating host", s.ResultsCheated, s.HostsByKind)
	}
}

func TestFailingHostReportsComputeErrorWithoutUploading(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = 1 })
	opts := testOptions(f)
	opts.FailFrac = 1
	stop := startRun(t, opts)
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reps := reportsOf(f.snapshotRequests(), "wu_0_0")
	if len(reps) != 1 || reps[0].State != int(state.ClientComputeError) || reps[0].ExitStatus != 1 || len(reps[0].FileInfos) != 0 {
		t.Fatalf("failing host reports = %+v, want one report with state 3, exit_status 1, no files", reps)
	}
	if len(f.uploads) != 0 {
		t.Errorf("failing host uploaded %d files, want none", len(f.uploads))
	}
	if s.ResultsFailed != 1 || s.ResultsComputed != 0 || s.ResultsAcked != 1 {
		t.Errorf("stats failed=%d computed=%d acked=%d, want 1, 0, 1", s.ResultsFailed, s.ResultsComputed, s.ResultsAcked)
	}
}

// Every host fails a job the demo app fails on, as the real demo_app does.
func TestHonestHostFailsJobTheDemoAppFailsOn(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.failInputs = 1, true })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reps := reportsOf(f.snapshotRequests(), "wu_0_0")
	if len(reps) != 1 || reps[0].State != int(state.ClientComputeError) || len(reps[0].FileInfos) != 0 {
		t.Fatalf("reports of a FAIL job = %+v, want one compute error without files", reps)
	}
	if s.ResultsFailed != 1 || s.ResultsComputed != 0 {
		t.Errorf("stats failed=%d computed=%d, want 1, 0", s.ResultsFailed, s.ResultsComputed)
	}
}

func TestVanishingHostTakesWorkAndNeverComesBack(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = -1 })
	opts := testOptions(f)
	opts.VanishFrac = 1
	// With every host gone Run has nothing left to do and returns by itself.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Run(ctx, opts)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want it to return nil once its only host vanished", err, ctx.Err())
	}
	reqs := f.snapshotRequests()
	if len(reqs) != 1 || len(reqs[0].sent) != 1 {
		t.Fatalf("fake saw %d requests, want exactly 1 that got work", len(reqs))
	}
	if f.downloads != 0 || len(f.uploads) != 0 {
		t.Errorf("vanished host made %d downloads and %d uploads, want none", f.downloads, len(f.uploads))
	}
	if s.ResultsReceived != 1 || s.ResultsVanished != 1 || s.RPCs != 1 {
		t.Errorf("stats received=%d vanished=%d rpcs=%d, want 1, 1, 1", s.ResultsReceived, s.ResultsVanished, s.RPCs)
	}
}

func TestHostBacksOffExponentiallyAfter503(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.fail503 = 3 })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after three 503s", func(f *fakeProject) bool { return len(f.requests) >= 4 })
	s := stop()

	reqs := f.snapshotRequests()
	// Back-off n is 20 ms × 2^(n-1) times a factor in [0.5, 1.5).
	for n := 1; n <= 3; n++ {
		gap := reqs[n].at.Sub(reqs[n-1].at)
		least := time.Duration(float64(20*time.Millisecond) * float64(int(1)<<(n-1)) * 0.5)
		if gap < least-2*time.Millisecond {
			t.Errorf("gap before request %d = %s, want at least %s after %d failures", n+1, gap, least, n)
		}
	}
	if reqs[3].status != 200 || reqs[3].req.HostID != 0 {
		t.Errorf("fourth request status=%d hostid=%d, want 200 and still 0 (never registered)", reqs[3].status, reqs[3].req.HostID)
	}
	if s.RPCErrors != 3 {
		t.Errorf("stats rpc_errors = %d, want 3", s.RPCErrors)
	}
}

func TestHostHonoursRequestDelay(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	const delay = 0.1
	f.set(func(f *fakeProject) { f.jobs, f.requestDelay = 2, delay })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "three requests", func(f *fakeProject) bool { return len(f.requests) >= 3 })
	stop()

	reqs := f.snapshotRequests()
	for i := 1; i < 3; i++ {
		if gap := reqs[i].at.Sub(reqs[i-1].at); gap < seconds(delay)-2*time.Millisecond {
			t.Errorf("gap before request %d = %s, want at least request_delay %gs", i+1, gap, delay)
		}
	}
}

func TestResultAbortDropsTask(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) {
		f.jobs, f.nextRPCDelay = 1, 0.02
		f.abort["wu_0_0"] = true
	})
	opts := testOptions(f)
	opts.ComputeTime = time.Hour // never finishes on its own
	stop := startRun(t, opts)
	// next_rpc_delay brings the busy host back; it lists the task in
	// progress, gets the abort, and the request after that must not list it.
	f.waitFor(t, "a request after the abort", func(f *fakeProject) bool {
		for i, r := range f.requests {
			if i > 0 && mentions(f.requests[i-1], "wu_0_0") && !mentions(r, "wu_0_0") {
				return true
			}
		}
		return false
	})
	s := stop()
	f.snapshotRequests() // orders the handlers' writes before the reads below
	if s.ResultsAborted != 1 || len(f.uploads) != 0 {
		t.Errorf("stats aborted=%d, uploads=%d; want 1 and 0", s.ResultsAborted, len(f.uploads))
	}
}

func TestManyHostsStopCleanlyAndWriteReport(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = -1 })
	opts := testOptions(f)
	opts.Hosts, opts.NCPUs = 12, 2
	opts.Authenticators = []string{"k1", "k2", "k3"}
	opts.FailFrac, opts.CheatFrac = 0.25, 0.25
	opts.SummaryEvery = 20 * time.Millisecond
	stop := startRun(t, opts)
	f.waitFor(t, "24 acked results and every host registered", func(f *fakeProject) bool {
		n, ids := 0, map[int64]bool{}
		for _, r := range f.requests {
			n += len(r.acked)
			ids[r.req.HostID] = true
		}
		return n >= 24 && len(ids) == 13 // 12 host ids and 0
	})
	s := stop()

	if s.Hosts != 12 || s.HostsByKind["failing"] != 3 || s.HostsByKind["cheating"] != 3 || s.HostsByKind["normal"] != 6 {
		t.Errorf("stats hosts=%d by kind %v, want 12: 3 failing, 3 cheating, 6 normal", s.Hosts, s.HostsByKind)
	}
	users := map[string]map[int64]bool{}
	for _, r := range f.snapshotRequests() {
		if r.req.HostID == 0 {
			continue
		}
		if users[r.req.Authenticator] == nil {
			users[r.req.Authenticator] = map[int64]bool{}
		}
		users[r.req.Authenticator][r.req.HostID] = true
	}
	for _, k := range opts.Authenticators {
		if len(users[k]) != 4 {
			t.Errorf("user %s has %d hosts, want 4 (12 hosts round-robin over 3 users)", k, len(users[k]))
		}
	}
	// The last replies may still be in flight when the run stops, so the
	// client can have applied fewer acks than the fake sent.
	if f, c := s.ByKind["failing"], s.ByKind["cheating"]; f.Failed == 0 || f.Failed != s.ResultsFailed || f.Computed != 0 ||
		c.Computed != s.ResultsCheated || len(s.ByKind) != 3 {
		t.Errorf("stats by kind = %+v, want the failing hosts' failures and the cheaters' outputs, 3 kinds", s.ByKind)
	}
	if s.ResultsAcked < 12 || s.ResultsFailed == 0 || s.ResultsCheated == 0 {
		t.Errorf("stats = %+v, want at least 12 acked and some failed and cheated", s)
	}

	path := filepath.Join(t.TempDir(), "report.json")
	if err := s.WriteFile(path); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("report %s is not JSON: %v", b, err)
	}
	for _, k := range []string{"rpcs", "rpc_errors", "results_received", "results_computed", "results_uploaded",
		"upload_errors", "results_reported", "results_acked", "results_failed", "results_vanished", "results_cheated", "hosts_by_kind", "by_kind"} {
		if _, ok := back[k]; !ok {
			t.Errorf("report lacks %q: %s", k, b)
		}
	}
}

func TestMaxRPCsEndsRun(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = -1 })
	opts := testOptions(f)
	opts.Hosts, opts.MaxRPCs = 3, 7
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Run(ctx, opts)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want nil on its own after 7 RPCs", err, ctx.Err())
	}
	if n := len(f.snapshotRequests()); s.RPCs != 7 || n != 7 {
		t.Errorf("stats rpcs=%d, fake saw %d; want 7 and 7", s.RPCs, n)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no authenticators", Options{SchedulerURL: "http://x/"}},
		{"fractions over 1", Options{SchedulerURL: "http://x/", Authenticators: []string{"k"}, FailFrac: 0.6, CheatFrac: 0.6}},
		{"negative hosts", Options{SchedulerURL: "http://x/", Authenticators: []string{"k"}, Hosts: -1}},
		{"late fraction pushes the sum over 1", Options{SchedulerURL: "http://x/", Authenticators: []string{"k"}, FailFrac: 0.5, LateFrac: 0.6}},
		{"late fraction over 1", Options{SchedulerURL: "http://x/", Authenticators: []string{"k"}, LateFrac: 1.5}},
		{"negative late-by", Options{SchedulerURL: "http://x/", Authenticators: []string{"k"}, LateBy: -time.Second}},
	} {
		if _, err := Run(context.Background(), tc.opts); err == nil {
			t.Errorf("%s: Run = nil error, want an options error", tc.name)
		}
	}
}

func TestUploadRetriesTransientErrorsAndReportsPermanentFailureAsClientError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		statuses   []int
		wantState  state.ClientState
		wantExit   int
		wantTries  int
		wantStored bool
	}{
		{"transient then success", []int{1, 1}, state.ClientFilesUploaded, 0, 3, true},
		{"permanent", []int{-1}, state.ClientUploadFailed, errResultUpload, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeProject(t)
			f.set(func(f *fakeProject) { f.jobs, f.uploadStatus = 1, tc.statuses })
			stop := startRun(t, testOptions(f))
			f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
			s := stop()

			reps := reportsOf(f.snapshotRequests(), "wu_0_0")
			if len(reps) != 1 || reps[0].State != int(tc.wantState) || reps[0].ExitStatus != tc.wantExit {
				t.Fatalf("reports = %+v, want one with state %d, exit_status %d", reps, tc.wantState, tc.wantExit)
			}
			_, stored := f.uploads["wu_0_0_0"]
			if f.uploadTries != tc.wantTries || stored != tc.wantStored {
				t.Errorf("upload tries = %d, stored = %v; want %d, %v", f.uploadTries, stored, tc.wantTries, tc.wantStored)
			}
			if s.UploadErrors != int64(len(tc.statuses)) {
				t.Errorf("stats upload_errors = %d, want %d", s.UploadErrors, len(tc.statuses))
			}
		})
	}
}

func TestInputWithWrongMD5FailsTask(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.badMD5 = 1, true })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after the ack of wu_0_0", droppedAfterAck("wu_0_0"))
	s := stop()

	reps := reportsOf(f.snapshotRequests(), "wu_0_0")
	if len(reps) != 1 || reps[0].State != int(state.ClientFilesDownloading) || reps[0].ExitStatus != errMD5Failed {
		t.Fatalf("reports = %+v, want one with state 1, exit_status %d", reps, errMD5Failed)
	}
	if f.downloads != 1 || len(f.uploads) != 0 || s.ResultsFailed != 1 {
		t.Errorf("downloads=%d uploads=%d failed=%d, want 1 (a checksum error is permanent), 0, 1", f.downloads, len(f.uploads), s.ResultsFailed)
	}
}

// TestJobOfSeveralFiles: a job of the demo's shape is computed from all its
// inputs and its command line, both outputs are uploaded, the gzip'd input
// is fetched from its gzipped_url, and the sticky model is downloaded once
// per host, listed as held in later requests, and taken from the host's
// copy when the reply leaves it out.
func TestJobOfSeveralFiles(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.shaped = 3, true })
	stop := startRun(t, testOptions(f))
	f.waitFor(t, "a request after the ack of wu_2_0", droppedAfterAck("wu_2_0"))
	s := stop()

	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range 3 {
		wu := fmt.Sprintf("wu_%d", i)
		files := demoapp.Files{demoapp.Input(wu), demoapp.Model(), demoapp.Params()}
		if got := f.uploads[wu+"_0_0"].data; !bytes.Equal(got, demoapp.Out(files, shapedRounds)) {
			t.Errorf("%s out = %q, want demoapp.Out of its three files and --rounds %d", wu, got, shapedRounds)
		}
		if got := f.uploads[wu+"_0_1"].data; !bytes.Equal(got, demoapp.Log(files, shapedRounds)) {
			t.Errorf("%s log = %q, want demoapp.Log", wu, got)
		}
		if f.downloadsOf[wu] != 0 || f.downloadsOf[wu+".gz"] != 1 {
			t.Errorf("%s downloaded %d times plain, %d gzip'd; want only gzip'd, once", wu, f.downloadsOf[wu], f.downloadsOf[wu+".gz"])
		}
	}
	if f.downloadsOf["model"] != 1 || f.downloadsOf["params"] != 3 {
		t.Errorf("model downloaded %d times, params %d; want 1 and 3", f.downloadsOf["model"], f.downloadsOf["params"])
	}
	last := f.requests[len(f.requests)-1].req
	if len(last.HostFiles) != 1 || last.HostFiles[0].Name != "model" || last.HostFiles[0].Status != protocol.FilePresent ||
		last.HostFiles[0].Nbytes != float64(len(demoapp.Model())) {
		t.Errorf("last request lists held files %+v, want the model, present", last.HostFiles)
	}
	if s.StickyReused != 2 || s.GzippedDownloads != 3 || s.FilesDownloaded != 7 || s.FilesUploaded != 6 {
		t.Errorf("stats sticky_reused=%d gzipped=%d downloaded=%d uploaded=%d; want 2, 3, 7, 6",
			s.StickyReused, s.GzippedDownloads, s.FilesDownloaded, s.FilesUploaded)
	}
}

// TestTrickleUps: an app that trickles sends one trickle-up per task with
// its CPU time; the host sends it in every request until a reply acks it,
// then never again; trickle-downs are counted.
func TestTrickleUps(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.withholdMsgAcks, f.trickleDown = 2, 1, true })
	opts := testOptions(f)
	opts.TrickleFrac = 1
	stop := startRun(t, opts)
	f.waitFor(t, "a request after the ack of wu_1_0", droppedAfterAck("wu_1_0"))
	s := stop()

	reqs := f.snapshotRequests()
	sent := map[string]int{}
	acked := map[string]bool{}
	for i, r := range reqs {
		for _, m := range r.req.MsgsFromHost {
			if acked[m.ResultName] {
				t.Errorf("request %d sends the trickle-up of %s again after it was acked", i, m.ResultName)
			}
			sent[m.ResultName]++
			if m.Variety != "progress" || !strings.Contains(m.XML, "<cpu_time>") || m.Time <= 0 {
				t.Errorf("trickle-up %+v: want variety progress, a time, <cpu_time>", m)
			}
		}
		for _, m := range r.req.MsgsFromHost {
			acked[m.ResultName] = acked[m.ResultName] || r.msgAcked
		}
	}
	if len(sent) != 2 || sent["wu_0_0"] < 2 {
		t.Errorf("trickle-ups sent per task %v; want both tasks', wu_0_0's again after its ack was withheld", sent)
	}
	if s.TricklesSent != 2 || s.TricklesAcked != 2 || s.TrickleDowns < 1 {
		t.Errorf("stats trickles sent=%d acked=%d downs=%d; want 2, 2, at least 1", s.TricklesSent, s.TricklesAcked, s.TrickleDowns)
	}
}
