package simclient

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
)

// fakeProject is a tiny project server: a scheduler that hands out at most
// maxPerRPC results (default one) per request, a download URL per job, an upload handler, and
// acks for reports. Tests set its knobs before the run and read what it saw.
type fakeProject struct {
	srv *httptest.Server

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced after every request
	jobs         int           // results left to hand out; -1 means unlimited
	fail503      int           // answer this many scheduler requests with 503 first
	withholdAcks int           // do not ack this many reports
	requestDelay float64
	nextRPCDelay float64
	abort        map[string]bool // results to abort when a request lists them in progress
	uploadStatus []int           // data-server statuses for the next uploads (then 0)
	badMD5       bool            // announce a wrong md5 for inputs
	failInputs   bool            // inputs start with demoapp.FailMarker
	deadline     time.Duration   // report deadline of results handed out; 0 = an hour
	maxPerRPC    int             // results one reply may carry; 0 = 1
	// shaped hands out jobs of the demo's shape: "in" offered gzip'd,
	// the sticky "model" (described only to a host not listing it as
	// held), "params", --rounds shapedRounds, outputs "out" and "log".
	shaped      bool
	downloadsOf map[string]int // downloads by URL path name
	// withholdMsgAcks: do not ack the trickle-ups of this many requests
	// that carry some; trickleDown: send one trickle-down per reply
	// acking trickle-ups.
	withholdMsgAcks int
	trickleDown     bool
	down            bool // answer every scheduler request with 503 while set
	// gpuType, when set, is a GPU resource the fake has an app version
	// for ("any": every GPU type) (version 200, plan class "gpu", one GPU
	// and gpuCPUs CPUs per task): it covers that resource's req_secs as
	// it covers the CPU's.
	gpuType string
	gpuCPUs float64
	// mtNCPUs > 0 makes the CPU version multi-threaded (plan class "mt",
	// avg_ncpus mtNCPUs).
	mtNCPUs float64
	// noRsc is sent as <no_rsc_apps>; "CPU" in it also stops CPU work.
	noRsc []string
	// overloaded answers work requests with no work and <overloaded/>.
	overloaded  bool
	nextHost    int64
	issued      int
	requests    []fakeRequest
	downloads   int
	uploadTries int
	uploads     map[string]fakeUpload
	uploadTimes map[string]time.Time
	deadlines   []float64 // report deadlines handed out, in order
}

type fakeRequest struct {
	at     time.Time
	status int
	req    protocol.SchedulerRequest
	acked  []string
	sent   []string
	// msgAcked: the reply had <message_ack/>.
	msgAcked bool
}

type fakeUpload struct {
	data      []byte
	signature string
	maxNbytes string
	md5       string
}

// fakeFpopsEst is the rsc_fpops_est of every job the fake hands out.
const fakeFpopsEst = 1e10

// testSignature is the upload certificate the fake puts on every output.
const testSignature = "\n0123abcd\nef456789\n.\n"

func newFakeProject(t *testing.T) *fakeProject {
	t.Helper()
	f := &fakeProject{changed: make(chan struct{}), uploads: map[string]fakeUpload{}, uploadTimes: map[string]time.Time{}, abort: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scheduler", f.scheduler)
	mux.HandleFunc("GET /download/{name}", f.download)
	mux.HandleFunc("POST /file_upload_handler", f.upload)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProject) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeProject) scheduler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	rec := fakeRequest{at: time.Now(), status: http.StatusOK}
	req, err := protocol.ParseSchedulerRequest(bytes.NewReader(body))
	if err == nil {
		rec.req = *req
	} else {
		rec.status = http.StatusBadRequest
		f.requests = append(f.requests, rec)
		http.Error(w, err.Error(), rec.status)
		return
	}
	if f.fail503 > 0 || f.down {
		if !f.down {
			f.fail503--
		}
		rec.status = http.StatusServiceUnavailable
		f.requests = append(f.requests, rec)
		http.Error(w, "overloaded", rec.status)
		return
	}
	reply := protocol.SchedulerReply{RequestDelay: f.requestDelay, NextRPCDelay: f.nextRPCDelay}
	if rec.req.HostID == 0 {
		f.nextHost++
		reply.HostID = f.nextHost
	}
	for _, res := range rec.req.Results {
		if f.withholdAcks > 0 {
			f.withholdAcks--
			continue
		}
		reply.ResultAcks = append(reply.ResultAcks, protocol.NameElement{Name: res.Name})
		rec.acked = append(rec.acked, res.Name)
	}
	if len(rec.req.MsgsFromHost) > 0 {
		if f.withholdMsgAcks > 0 {
			f.withholdMsgAcks--
		} else {
			reply.MessageAck = &protocol.Empty{}
			rec.msgAcked = true
			if f.trickleDown {
				reply.Raw = append(reply.Raw, fmt.Sprintf("<trickle_down>\n<result_name>%s</result_name>\n<time>1</time>\nkeep going\n</trickle_down>\n",
					rec.req.MsgsFromHost[0].ResultName))
			}
		}
	}
	for _, o := range rec.req.OtherResults {
		if f.abort[o.Name] {
			reply.ResultAborts = append(reply.ResultAborts, protocol.NameElement{Name: o.Name})
		}
	}
	// Like the real scheduler, cover the seconds asked for (at the fake's
	// estimate of 1e10 fpops per task) and the idle CPUs, up to maxPerRPC
	// results; at least one.
	covered, perTask := 0.0, 1.0
	if p := rec.req.HostInfo.PFpops; p > 0 {
		perTask = fakeFpopsEst / p
	}
	reply.NoRscApps = f.noRsc
	asksGPU := false
	for _, c := range rec.req.Coprocs.Resources() {
		asksGPU = asksGPU || c.ReqSecs > 0
	}
	if f.overloaded && (rec.req.WorkReqSeconds > 0 || asksGPU) {
		reply.Overloaded = &protocol.Empty{}
		f.requests = append(f.requests, rec)
		_ = protocol.WriteSchedulerReply(w, &reply)
		return
	}
	if f.gpuType != "" {
		for _, c := range rec.req.Coprocs.Resources() {
			if (c.Type != f.gpuType && f.gpuType != "any") || !(c.ReqSecs > 0) {
				continue
			}
			reply.Apps = []protocol.App{{Name: demoapp.AppName}}
			reply.AppVersions = append(reply.AppVersions, protocol.AppVersion{AppName: demoapp.AppName, VersionNum: 200,
				Platform: platformName, PlanClass: "gpu", AvgNCPUs: f.gpuCPUs, Coprocs: []protocol.CoprocUsage{{Type: c.Type, Count: 1}}})
			gcovered := 0.0
			for n := 0; f.jobs != 0 && n < max(f.maxPerRPC, 1); n++ {
				if n > 0 && gcovered >= c.ReqSecs && float64(n) >= c.ReqInstances {
					break
				}
				gcovered += fakeFpopsEst / max(c.PeakFlops*DefaultGPUEfficiency, 1)
				f.jobs--
				f.plainJob(&reply, &rec, 200, "gpu")
			}
		}
	}
	if f.mtNCPUs > 0 && rec.req.WorkReqSeconds > 0 {
		reply.AppVersions = append(reply.AppVersions, protocol.AppVersion{AppName: demoapp.AppName, VersionNum: 100,
			Platform: platformName, PlanClass: "mt", AvgNCPUs: f.mtNCPUs, MaxNCPUs: f.mtNCPUs})
	}
	for n := 0; rec.req.WorkReqSeconds > 0 && !slices.Contains(f.noRsc, protocol.ResourceCPU) && f.jobs != 0 && n < max(f.maxPerRPC, 1); n++ {
		if n > 0 && covered >= rec.req.WorkReqSeconds && float64(n) >= rec.req.CPUReqInstances {
			break
		}
		covered += perTask
		f.jobs--
		planClass := ""
		if f.mtNCPUs > 0 {
			planClass = "mt"
		}
		f.plainJob(&reply, &rec, 100, planClass)
	}
	f.requests = append(f.requests, rec)
	_ = protocol.WriteSchedulerReply(w, &reply)
}

// plainJob adds one job to reply, for the app version of the given
// number and plan class; f.mu is held.
func (f *fakeProject) plainJob(reply *protocol.SchedulerReply, rec *fakeRequest, version int, planClass string) {
	wu := fmt.Sprintf("wu_%d", f.issued)
	res := wu + "_0"
	f.issued++
	input := f.input(wu)
	deadline := float64(time.Now().Add(time.Hour).Unix())
	if f.deadline > 0 {
		deadline = float64(time.Now().Add(f.deadline).UnixNano()) / 1e9
	}
	sum := md5hex(input)
	if f.badMD5 {
		sum = md5hex(nil)
	}
	reply.Apps = []protocol.App{{Name: demoapp.AppName}}
	if f.shaped {
		f.shapedJob(reply, &rec.req, wu, res, deadline)
		rec.sent = append(rec.sent, res)
		f.deadlines = append(f.deadlines, deadline)
		return
	}
	reply.FileInfos = append(reply.FileInfos,
		protocol.FileInfo{Name: wu + "_in", URLs: []string{f.srv.URL + "/download/" + wu}, Nbytes: float64(len(input)), MD5Cksum: sum},
		protocol.FileInfo{Name: res + "_0", URLs: []string{f.srv.URL + "/file_upload_handler"}, MaxNbytes: 100000, XMLSignature: testSignature},
	)
	reply.Workunits = append(reply.Workunits, protocol.Workunit{Name: wu, AppName: demoapp.AppName, RscFpopsEst: fakeFpopsEst,
		FileRefs: []protocol.FileRef{{FileName: wu + "_in", OpenName: "in"}}})
	reply.Results = append(reply.Results, protocol.Result{Name: res, WUName: wu, Platform: platformName, VersionNum: version,
		PlanClass: planClass, ReportDeadline: deadline,
		FileRefs: []protocol.FileRef{{FileName: res + "_0", OpenName: "out"}}})
	rec.sent = append(rec.sent, res)
	f.deadlines = append(f.deadlines, deadline)
}

// shapedRounds is the --rounds of the fake's shaped jobs.
const shapedRounds = 7

// shapedJob adds job wu of the demo's shape to reply; f.mu is held.
func (f *fakeProject) shapedJob(reply *protocol.SchedulerReply, req *protocol.SchedulerRequest, wu, res string, deadline float64) {
	input := f.input(wu)
	z := gzipBytes(input)
	model, params := demoapp.Model(), demoapp.Params()
	reply.FileInfos = append(reply.FileInfos,
		protocol.FileInfo{Name: wu + "_in", URLs: []string{f.srv.URL + "/download/" + wu}, GzippedURLs: []string{f.srv.URL + "/download/" + wu + ".gz"},
			Nbytes: float64(len(input)), GzippedNbytes: float64(len(z)), MD5Cksum: md5hex(input)},
		protocol.FileInfo{Name: wu + "_params", URLs: []string{f.srv.URL + "/download/params"}, Nbytes: float64(len(params)), MD5Cksum: md5hex(params)},
		protocol.FileInfo{Name: res + "_0", URLs: []string{f.srv.URL + "/file_upload_handler"}, MaxNbytes: 100000, XMLSignature: testSignature},
		protocol.FileInfo{Name: res + "_1", URLs: []string{f.srv.URL + "/file_upload_handler"}, MaxNbytes: 100000, XMLSignature: testSignature},
	)
	held := slices.ContainsFunc(req.HostFiles, func(h protocol.HostFile) bool { return h.Name == "model" && h.Status == protocol.FilePresent })
	described := slices.ContainsFunc(reply.FileInfos, func(fi protocol.FileInfo) bool { return fi.Name == "model" })
	if !held && !described {
		reply.FileInfos = append(reply.FileInfos, protocol.FileInfo{Name: "model", URLs: []string{f.srv.URL + "/download/model"},
			Nbytes: float64(len(model)), MD5Cksum: md5hex(model), Sticky: &protocol.Empty{}})
	}
	reply.Workunits = append(reply.Workunits, protocol.Workunit{Name: wu, AppName: demoapp.AppName, RscFpopsEst: fakeFpopsEst,
		CommandLine: demoapp.CommandLine(shapedRounds),
		FileRefs:    []protocol.FileRef{{FileName: wu + "_in", OpenName: "in"}, {FileName: "model", OpenName: "model"}, {FileName: wu + "_params", OpenName: "params"}}})
	reply.Results = append(reply.Results, protocol.Result{Name: res, WUName: wu, Platform: platformName, VersionNum: 100,
		ReportDeadline: deadline,
		FileRefs:       []protocol.FileRef{{FileName: res + "_0", OpenName: "out"}, {FileName: res + "_1", OpenName: "log"}}})
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func (f *fakeProject) download(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downloads++
	if f.downloadsOf == nil {
		f.downloadsOf = map[string]int{}
	}
	f.downloadsOf[name]++
	f.notify()
	switch base, gz := strings.CutSuffix(name, ".gz"); {
	case name == "model":
		_, _ = w.Write(demoapp.Model())
	case name == "params":
		_, _ = w.Write(demoapp.Params())
	case gz:
		_, _ = w.Write(gzipBytes(f.input(base)))
	default:
		_, _ = w.Write(f.input(name))
	}
}

// input is the input file of job wu; f.mu is held.
func (f *fakeProject) input(wu string) []byte {
	if f.failInputs {
		return append([]byte(demoapp.FailMarker), demoapp.Input(wu)...)
	}
	return demoapp.Input(wu)
}

func (f *fakeProject) upload(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	i := bytes.Index(body, []byte("<data>\n"))
	if i < 0 {
		_, _ = io.WriteString(w, "<data_server_reply>\n    <status>-1</status>\n    <message>no data</message>\n</data_server_reply>\n")
		return
	}
	head, data := body[:i+len("<data>\n")], body[i+len("<data>\n"):]
	up, err := protocol.ParseUploadHeader(head)
	if err != nil || up.Nbytes != int64(len(data)) || up.Offset != 0 {
		_ = protocol.WriteUploadReply(w, protocol.UploadReply{Status: protocol.UploadPermanent, Message: fmt.Sprint("bad header: ", err)})
		return
	}
	name, sig, maxN, sum := up.Name, up.XMLSignature, strconv.FormatInt(up.MaxNbytes, 10), up.MD5Cksum
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	f.uploadTries++
	if len(f.uploadStatus) > 0 {
		status := f.uploadStatus[0]
		f.uploadStatus = f.uploadStatus[1:]
		if status != 0 {
			fmt.Fprintf(w, "<data_server_reply>\n    <status>%d</status>\n    <message>refused</message>\n</data_server_reply>\n", status)
			return
		}
	}
	f.uploads[name] = fakeUpload{data: data, signature: sig, maxNbytes: maxN, md5: sum}
	f.uploadTimes[name] = time.Now()
	_, _ = io.WriteString(w, "<data_server_reply>\n    <status>0</status>\n</data_server_reply>\n")
}

// set changes the fake's knobs under its lock.
func (f *fakeProject) set(fn func(f *fakeProject)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// waitFor blocks until cond, evaluated under the fake's lock after every
// request it handles, holds; it fails the test after a few seconds.
func (f *fakeProject) waitFor(t *testing.T, what string, cond func(f *fakeProject) bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok := cond(f)
		ch := f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("waiting for %s: timed out; fake saw %d scheduler requests, %d downloads, %d uploads",
				what, len(f.requests), f.downloads, len(f.uploads))
		}
	}
}

// snapshotRequests returns a copy of the scheduler requests seen so far.
func (f *fakeProject) snapshotRequests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

// testOptions is one fast host: 10 ms tasks and the real back-off policy
// scaled so 1 min becomes 20 ms.
func testOptions(f *fakeProject) Options {
	return Options{
		SchedulerURL:   f.srv.URL + "/scheduler",
		Authenticators: []string{"acct_key_1"},
		Hosts:          1,
		NCPUs:          1,
		ComputeTime:    10 * time.Millisecond,
		BackoffScale:   1.0 / 3000,
		BackoffMax:     500 * time.Millisecond,
		HTTPTimeout:    5 * time.Second,
		SummaryEvery:   -1,
		Seed:           1,
	}
}

// startRun runs the simulation in the background; stop ends it and
// returns its statistics.
func startRun(t *testing.T, opts Options) (stop func() Stats) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type out struct {
		s   Stats
		err error
	}
	done := make(chan out, 1)
	go func() {
		s, err := Run(ctx, opts)
		done <- out{s, err}
	}()
	var once sync.Once
	var res out
	stop = func() Stats {
		once.Do(func() {
			cancel()
			select {
			case res = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10s of cancel")
			}
			if res.err != nil {
				t.Errorf("Run: %v, want nil", res.err)
			}
		})
		return res.s
	}
	t.Cleanup(func() { stop() })
	return stop
}

// reportsOf returns every report of result name the fake received.
func reportsOf(reqs []fakeRequest, name string) []protocol.ReportResult {
	var out []protocol.ReportResult
	for _, r := range reqs {
		for _, res := range r.req.Results {
			if res.Name == name {
				out = append(out, res)
			}
		}
	}
	return out
}

// mentions reports whether a request lists result name as reported or in
// progress.
func mentions(r fakeRequest, name string) bool {
	for _, res := range r.req.Results {
		if res.Name == name {
			return true
		}
	}
	for _, o := range r.req.OtherResults {
		if o.Name == name {
			return true
		}
	}
	return false
}
