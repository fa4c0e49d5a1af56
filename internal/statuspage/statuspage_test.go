package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const now = int64(1_700_000_000)

// seed inserts jobs and results in known states and returns the status
// they must produce (daemons aside).
func seed(t *testing.T, st *store.Store) statuspage.Status {
	t.Helper()
	apps := map[string]int64{}
	for _, name := range []string{"alpha", "beta"} {
		id := storetest.App(t, st, storetest.AppOptions{CreateTime: now, Name: name, UserFriendlyName: name, CreditPolicy: "fpops"}).ID
		apps[name] = id
	}
	never := now + 1_000_000
	jobs := []storetest.JobOptions{
		{App: apps["alpha"], Name: "due_oldest", TransitionTime: now - 100, NeedValidate: true},
		{App: apps["alpha"], Name: "due_assim", TransitionTime: now - 10, AssimilateState: state.AssimilateReady, FileDeleteState: state.FileDeleteReady},
		{App: apps["beta"], Name: "assim_hour", TransitionTime: never, AssimilateState: state.AssimilateDone, ModTime: now - 600},
		{App: apps["beta"], Name: "assim_day_held", TransitionTime: never, AssimilateState: state.AssimilateDone, ModTime: now - 7200,
			HoldReason: state.ErrTooManyErrorResults},
		{App: apps["beta"], Name: "assim_old_failed", TransitionTime: never, AssimilateState: state.AssimilateDone, ModTime: now - 100_000,
			ErrorMask: state.ErrTooManyTotalResults},
	}
	var wuIDs []int64
	for _, wu := range jobs {
		wu.CreateTime = now - 200_000
		id := storetest.Job(t, st, wu).ID
		wuIDs = append(wuIDs, id)
	}
	results := []storetest.InstanceOptions{
		{App: apps["alpha"], ServerState: state.ServerUnsent},
		{App: apps["alpha"], ServerState: state.ServerInProgress},
		{App: apps["alpha"], ServerState: state.ServerInProgress},
		{App: apps["beta"], ServerState: state.ServerInProgress},
		{App: apps["beta"], ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 60,
			ValidateState: state.ValidateValid, ModTime: now - 30, FileDeleteState: state.FileDeleteReady},
		{App: apps["beta"], ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 5000,
			ValidateState: state.ValidateInvalid, ModTime: now - 5000},
		{App: apps["beta"], ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 90_000,
			ValidateState: state.ValidateValid, ModTime: now - 90_000},
		{App: apps["beta"], ServerState: state.ServerOver, Outcome: state.OutcomeClientError, ReceivedTime: now - 120, ModTime: now - 120},
	}
	for i, r := range results {
		r.CreateTime = now - 200_000
		r.Job = wuIDs[0]
		r.Name = fmt.Sprintf("r%d", i)
		storetest.Instance(t, st, r)
	}
	// What the scheduler, validator and assimilator counted as they wrote
	// the rows above, and 40 reports of results db_purge has deleted since.
	for _, c := range []struct{ at, kind, n int64 }{
		{now - 60, 1, 1}, {now - 5000, 1, 1}, {now - 90_000, 1, 1}, {now - 120, 1, 1}, {now - 300, 1, 40},
		{now - 30, 2, 1}, {now - 5000, 2, 1}, {now - 90_000, 2, 1},
		{now - 600, 3, 1}, {now - 7200, 3, 1}, {now - 100_000, 3, 1},
	} {
		storetest.Exec(t, st, `INSERT INTO throughput (minute, kind, shard, n) VALUES (?, ?, 0, ?)
ON DUPLICATE KEY UPDATE n = n + ?`, c.at/60, c.kind, c.n, c.n)
	}
	return statuspage.Status{
		Time: now,
		Queues: statuspage.Queues{UnsentResults: 1, InProgressResults: 3, JobsDueTransition: 2, OldestDueTransitionAgeSeconds: 100,
			JobsAwaitingValidation: 1, JobsAwaitingAssimilation: 1, JobFilesAwaitingDeletion: 1, ResultFilesAwaitingDeletion: 1,
			JobsFailed: 1, JobsHeld: 1},
		InProgressByApp: []statuspage.AppCount{{App: "alpha", Count: 2}, {App: "beta", Count: 1}},
		Throughput: statuspage.Throughput{
			LastHour: statuspage.Window{ResultsReported: 42, ResultsValidated: 1, JobsAssimilated: 1},
			LastDay:  statuspage.Window{ResultsReported: 43, ResultsValidated: 2, JobsAssimilated: 2},
		},
		Workunits: statuspage.WorkunitCounts{Total: 5, NeedTransition: 2, NeedValidate: 1, NeedAssimilate: 1, FileDeleteReady: 1,
			Failed: 1, Held: 1},
		ResultFiles: statuspage.ResultFileCounts{Total: 8, FileDeleteReady: 1},
	}
}

// daemons starts an up daemon (with a last-success gauge 60 s old), a
// failing one (a loop daemon's admin listener after its passes failed
// daemon.UnhealthyAfter times in a row) and a dead address, and returns
// them with one target that has no address.
func daemons(t *testing.T) []statuspage.Target {
	t.Helper()
	up := http.NewServeMux()
	up.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	up.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# HELP taskserver_validator_last_success_timestamp_seconds Unix time of the last pass that succeeded.\n"+
			"# TYPE taskserver_validator_last_success_timestamp_seconds gauge\n"+
			"taskserver_validator_last_success_timestamp_seconds %g\n", float64(now-60))
	})
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	reg := daemon.NewRegistry("assimilator")
	m := daemon.NewLoopMetrics(reg, "assimilator")
	failing := failingService{errors.New("list ready jobs: database unreachable")}
	for range daemon.UnhealthyAfter {
		_ = daemon.Loop(context.Background(), quietLogger(), m, failing, daemon.LoopOptions{OnePass: true})
	}
	failSrv := httptest.NewServer(daemon.AdminMux(reg, m.Health()))
	t.Cleanup(failSrv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	return []statuspage.Target{
		{Name: "validator", Program: "validator", Address: strings.TrimPrefix(upSrv.URL, "http://")},
		{Name: "assimilator", Program: "assimilator", Address: strings.TrimPrefix(failSrv.URL, "http://")},
		{Name: "transitioner", Program: "transitioner", Address: dead},
		{Name: "feeder", Program: "feeder"},
	}
}

// failingService is a daemon pass that always fails with its error.
type failingService struct{ err error }

func (f failingService) RunOnce(context.Context) (int, error) { return 0, f.err }

// clock is a settable clock for the handler.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestHandlerShowsInsertedCounts(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	want := seed(t, st)
	targets := daemons(t)
	clk := &clock{t: time.Unix(now, 0)}
	h := statuspage.New(st, targets, statuspage.Options{Now: clk.now, Logger: quietLogger()})

	code, body := get(t, h, "/status.json")
	if code != http.StatusOK {
		t.Fatalf("GET /status.json = %d %s, want 200", code, body)
	}
	var got statuspage.Status
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode /status.json: %v\n%s", err, body)
	}
	if got.Time != want.Time || got.Queues != want.Queues || got.Throughput != want.Throughput ||
		got.Workunits != want.Workunits || got.ResultFiles != want.ResultFiles {
		t.Errorf("/status.json =\n%+v %+v %+v %+v\nwant\n%+v %+v %+v %+v", got.Queues, got.Throughput, got.Workunits, got.ResultFiles,
			want.Queues, want.Throughput, want.Workunits, want.ResultFiles)
	}
	if fmt.Sprint(got.InProgressByApp) != fmt.Sprint(want.InProgressByApp) {
		t.Errorf("in progress by app = %v, want %v", got.InProgressByApp, want.InProgressByApp)
	}
	states := map[string]statuspage.Daemon{}
	for _, d := range got.Daemons {
		states[d.Name] = d
	}
	if d := states["validator"]; d.State != statuspage.StateUp || d.LastSuccessAgeSeconds == nil || *d.LastSuccessAgeSeconds != 60 {
		t.Errorf("validator = %+v, want up with a last success 60 s ago", d)
	}
	if d := states["assimilator"]; d.State != statuspage.StateFailing ||
		d.Error != "/healthz: 503 3 consecutive passes failed, last: list ready jobs: database unreachable" {
		t.Errorf("assimilator = %+v, want failing with its /healthz message", d)
	}
	if d := states["transitioner"]; d.State != statuspage.StateDown || d.Error == "" || d.LastSuccessAgeSeconds != nil {
		t.Errorf("transitioner = %+v, want down with an error", d)
	}
	if d := states["feeder"]; d.State != statuspage.StateUnknown {
		t.Errorf("feeder = %+v, want unknown (no address)", d)
	}
	if len(got.Daemons) != 4 {
		t.Errorf("daemons = %+v, want the 4 targets", got.Daemons)
	}

	code, html := get(t, h, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200:\n%s", code, html)
	}
	for _, w := range []string{
		`id="unsent_results">1<`, `id="in_progress_results">3<`, `id="jobs_due_transition">2<`,
		`id="oldest_due_transition_age_seconds">100<`, `id="jobs_awaiting_validation">1<`, `id="jobs_awaiting_assimilation">1<`,
		`id="job_files_awaiting_deletion">1<`, `id="result_files_awaiting_deletion">1<`, `id="jobs_failed">1<`, `id="jobs_held">1<`,
		`id="in_progress-alpha">2<`, `id="in_progress-beta">1<`,
		`id="hour_results_reported">42<`, `id="day_results_reported">43<`, `id="hour_results_validated">1<`,
		`id="day_results_validated">2<`, `id="hour_jobs_assimilated">1<`, `id="day_jobs_assimilated">2<`,
		`id="daemon-transitioner" class="down"`, `<td class="state">down</td>`, `id="daemon-validator" class="up"`,
		`60 s ago`, `id="daemon-assimilator" class="failing"`, `http-equiv="refresh" content="60"`,
	} {
		if !strings.Contains(html, w) {
			t.Errorf("GET / lacks %q", w)
		}
	}
	if code, _ := get(t, h, "/nosuch"); code != http.StatusNotFound {
		t.Errorf("GET /nosuch = %d, want 404", code)
	}

	var text strings.Builder
	if err := statuspage.WriteText(&text, got); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"transitioner", "down", "unsent results", "alpha", "results reported", "need validation"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

func TestHandlerCachesForMaxAge(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	clk := &clock{t: time.Unix(now, 0)}
	h := statuspage.New(st, nil, statuspage.Options{Now: clk.now, MaxAge: 10 * time.Second, Logger: quietLogger()})
	unsent := func() int64 {
		t.Helper()
		_, body := get(t, h, "/status.json")
		var s statuspage.Status
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatalf("decode /status.json: %v\n%s", err, body)
		}
		return s.Queues.UnsentResults
	}
	if n := unsent(); n != 0 {
		t.Fatalf("unsent on an empty database = %d", n)
	}
	wuID := storetest.Job(t, st, storetest.JobOptions{CreateTime: now, Name: "j", TransitionTime: now}).ID
	storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: now, Job: wuID, Name: "r", ServerState: state.ServerUnsent})
	clk.add(5 * time.Second)
	if n := unsent(); n != 0 {
		t.Errorf("unsent 5 s after the first reading = %d, want the cached 0", n)
	}
	clk.add(6 * time.Second)
	if n := unsent(); n != 1 {
		t.Errorf("unsent 11 s after the first reading = %d, want 1 read anew", n)
	}
}

// TestInProgressByAppCountsManyResults: the split by app comes from the
// count tables, so it is given however many results are in progress (it
// used to be skipped past 20,000, which took seconds to count), and names
// an app no longer listed by its id.
func TestInProgressByAppCountsManyResults(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: now, Name: "j", TransitionTime: now + 1000})
	const n = 30_000
	storetest.Exec(t, st, fmt.Sprintf(`INSERT INTO result (create_time, workunitid, server_state, name, appid)
SELECT ?, ?, ?, CONCAT('r', seq), IF(seq %% 3 = 0, 999, ?) FROM seq_1_to_%d`, n), now, wu.ID, int(state.ServerInProgress), wu.AppID)
	h := statuspage.New(st, nil, statuspage.Options{Now: func() time.Time { return time.Unix(now, 0) }, Logger: quietLogger()})
	_, body := get(t, h, "/status.json")
	var s statuspage.Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decode /status.json: %v\n%s", err, body)
	}
	app, err := st.AppGet(context.Background(), wu.AppID)
	if err != nil {
		t.Fatal(err)
	}
	want := []statuspage.AppCount{{App: "app 999", Count: n / 3}, {App: app.Name, Count: n - n/3}}
	slices.SortFunc(want, func(a, b statuspage.AppCount) int { return strings.Compare(a.App, b.App) })
	if s.Queues.InProgressResults != n || !slices.Equal(s.InProgressByApp, want) {
		t.Errorf("with %d in progress: in progress %d, by app %v; want %v", n, s.Queues.InProgressResults, s.InProgressByApp, want)
	}
	if _, html := get(t, h, "/"); !strings.Contains(html, `id="in_progress-app 999">10000<`) {
		t.Errorf("page does not show app 999's 10000 results in progress")
	}
}

func TestHandlerDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	h := statuspage.New(st, nil, statuspage.Options{Logger: quietLogger()})
	if code, body := get(t, h, "/status.json"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) {
		t.Errorf("/status.json with the database closed = %d %s, want 503 with an error", code, body)
	}
	if code, body := get(t, h, "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot read the project database") {
		t.Errorf("/ with the database closed = %d, want 503 saying so:\n%s", code, body)
	}
}

func TestTargetsFromDaemonsSection(t *testing.T) {
	t.Parallel()
	got, err := statuspage.Targets([]byte(`db-dsn: x
daemons:
  - program: transitioner
    listen: 127.0.0.1:9102
  - program: validator
    replicas: 2
    listen: 127.0.0.1:9104
  - program: feeder
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []statuspage.Target{
		{Name: "transitioner", Program: "transitioner", Address: "127.0.0.1:9102"},
		{Name: "validator@0", Program: "validator", Address: "127.0.0.1:9104"},
		{Name: "validator@1", Program: "validator", Address: "127.0.0.1:9105"},
		{Name: "feeder", Program: "feeder"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Targets = %+v, want %+v", got, want)
	}
	if _, err := statuspage.Targets([]byte("daemons:\n  - replicas: 2\n")); err == nil || !strings.Contains(err.Error(), "program is missing") {
		t.Errorf("Targets of a daemon without a program = %v, want an error naming the missing program", err)
	}
}
