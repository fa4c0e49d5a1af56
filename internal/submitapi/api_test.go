package submitapi_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/submitapi"
)

type bundle struct {
	st          *store.Store
	srv         *httptest.Server
	reg         *prometheus.Registry
	resultsDir  string
	downloadDir string
	// API keys: alice and bob may submit, carol may not.
	alice, bob, carol string
	aliceID           int64
	// aliceAccount is alice's account key.
	aliceAccount string
}

func setup(t *testing.T, maxBody int64) *bundle {
	t.Helper()
	st := storetest.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	b := &bundle{st: st, resultsDir: filepath.Join(dir, "results"), downloadDir: filepath.Join(dir, "download"),
		alice: "0123456789abcdef0123456789abcdef", bob: "fedcba9876543210fedcba9876543210", carol: "aaaabbbbccccddddaaaabbbbccccdddd"}
	storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	for _, u := range []struct {
		key     string
		allowed bool
	}{{b.alice, true}, {b.bob, true}, {b.carol, false}} {
		account := "acct" + u.key[:28]
		id := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: u.key + "@example.org", Name: u.key,
			Authenticator: account, SubmitAllowed: u.allowed}).ID
		if err := st.UserSetAPIKeyHash(ctx, id, submitapi.KeyHash(u.key)); err != nil {
			t.Fatal(err)
		}
		if u.key == b.alice {
			b.aliceID = id
			b.aliceAccount = account
		}
	}
	svc := batch.New(batch.Options{Store: st, DownloadDir: b.downloadDir, Fanout: 8,
		ResultsDir: b.resultsDir, Now: func() time.Time { return time.Unix(1_700_000_000, 0) }})
	b.reg = prometheus.NewRegistry()
	api, err := submitapi.New(submitapi.Options{Batches: svc, Users: st, MaxBodyBytes: maxBody,
		Metrics: submitapi.NewMetrics(b.reg)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(submitapi.Prefix, api)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// metric returns the value of the sample of metric name with the given
// label pairs.
func (b *bundle) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	sample:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue sample
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

type reply struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a request as the user with account key key ("" for none).
func (b *bundle) do(t *testing.T, method, path, key string, body any, header ...string) reply {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		buf, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: out}
}

// want checks the status and, for errors, that the body is a JSON error.
func (r reply) want(t *testing.T, what string, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, body %s; want %d", what, r.code, r.body, code)
	}
	if code >= 400 {
		var e submitapi.ErrorResponse
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" {
			t.Fatalf("%s: error body %q is not {\"error\": ...}", what, r.body)
		}
	}
}

func submission(name string, inputs ...string) map[string]any {
	var list []map[string]any
	for i, in := range inputs {
		list = append(list, map[string]any{"name": "j" + strconv.Itoa(i), "input": base64.StdEncoding.EncodeToString([]byte(in))})
	}
	return map[string]any{"app": "demo", "name": name, "jobs": list}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	r := b.do(t, "GET", "/api/v1/batches", "", nil)
	r.want(t, "no Authorization", http.StatusUnauthorized)
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without WWW-Authenticate: Bearer: %v", r.header)
	}
	b.do(t, "GET", "/api/v1/batches", "nosuchkey", nil).want(t, "unknown key", http.StatusUnauthorized)
	b.do(t, "GET", "/api/v1/batches", strings.ToUpper(b.alice), nil).want(t, "key in other case", http.StatusUnauthorized)
	b.do(t, "GET", "/api/v1/batches", strings.Repeat("x", 300), nil).want(t, "overlong key", http.StatusUnauthorized)
	b.do(t, "GET", "/api/v1/batches", b.carol, nil).want(t, "user without submit permission", http.StatusForbidden)
	b.do(t, "GET", "/api/v1/batches", b.alice, nil).want(t, "allowed user", http.StatusOK)
	req, _ := http.NewRequest("GET", b.srv.URL+"/api/v1/batches", nil)
	req.Header.Set("Authorization", "Basic "+b.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Basic scheme: status %d, want 401", resp.StatusCode)
	}
}

func TestSubmitAndFollow(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := context.Background()
	sub := submission("b1", "first input", "second input")
	sub["params"] = map[string]any{"min_quorum": 1, "target_nresults": 1, "delay_bound": 7200, "priority": 3}
	sub["description"] = "two jobs"
	r := b.do(t, "POST", "/api/v1/batches", b.alice, sub, "Idempotency-Key", "k1")
	r.want(t, "submit", http.StatusCreated)
	var res submitapi.SubmitResponse
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Batch.Name != "b1" || res.Batch.Counts.Jobs != 2 || res.Batch.Counts.Pending != 2 ||
		res.Batch.App != "demo" || res.Batch.State != "in_progress" || res.Batch.UserID != b.aliceID ||
		r.header.Get("Location") != "/api/v1/batches/"+strconv.FormatInt(res.Batch.ID, 10) {
		t.Fatalf("submit answer = %s (Location %q)", r.body, r.header.Get("Location"))
	}
	wu, err := b.st.WorkunitGetByName(ctx, "b1_j1")
	if err != nil || wu.Batch != res.Batch.ID || wu.MinQuorum != 1 || wu.TargetNResults != 1 || wu.DelayBound != 7200 ||
		wu.Priority != 3 || wu.RscFpopsEst != 1e12 || wu.MaxErrorResults != 3 {
		t.Fatalf("job b1_j1 = %+v, %v; want the given parameters and defaults for the rest", wu, err)
	}
	if got := b.metric(t, "taskserver_scheduler_submit_api_jobs_submitted_total"); got != 2 {
		t.Errorf("jobs submitted metric = %g, want 2", got)
	}

	// Retried with the key in the body this time: same batch, 200.
	sub["idempotency_key"] = "k1"
	r = b.do(t, "POST", "/api/v1/batches", b.alice, sub)
	r.want(t, "retried submit", http.StatusOK)
	var again submitapi.SubmitResponse
	_ = json.Unmarshal(r.body, &again)
	if again.Created || again.Batch.ID != res.Batch.ID {
		t.Fatalf("retried submit = %s; want batch %d, created false", r.body, res.Batch.ID)
	}
	b.do(t, "POST", "/api/v1/batches", b.alice, sub, "Idempotency-Key", "k2").want(t, "header and field differ", http.StatusBadRequest)
	other := submission("b2", "x")
	other["idempotency_key"] = "k1"
	b.do(t, "POST", "/api/v1/batches", b.alice, other).want(t, "key reused for another batch", http.StatusUnprocessableEntity)
	b.do(t, "POST", "/api/v1/batches", b.bob, submission("b1", "x")).want(t, "taken batch name", http.StatusConflict)

	path := "/api/v1/batches/" + strconv.FormatInt(res.Batch.ID, 10)
	r = b.do(t, "GET", path, b.alice, nil)
	r.want(t, "status", http.StatusOK)
	var st batch.Status
	if err := json.Unmarshal(r.body, &st); err != nil || st.ID != res.Batch.ID || st.Description != "two jobs" {
		t.Fatalf("status = %s, %v", r.body, err)
	}
	b.do(t, "GET", path, b.bob, nil).want(t, "another user's batch", http.StatusNotFound)
	b.do(t, "GET", "/api/v1/batches/999999", b.alice, nil).want(t, "missing batch", http.StatusNotFound)
	b.do(t, "GET", "/api/v1/batches/abc", b.alice, nil).want(t, "non-numeric id", http.StatusNotFound)

	bobs := b.do(t, "POST", "/api/v1/batches", b.bob, submission("bob1", "x"))
	bobs.want(t, "bob's submit", http.StatusCreated)
	r = b.do(t, "GET", "/api/v1/batches", b.alice, nil)
	r.want(t, "list", http.StatusOK)
	var list submitapi.ListResponse
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Batches) != 1 || list.Batches[0].ID != res.Batch.ID {
		t.Fatalf("alice's list = %s; want b1 only", r.body)
	}
	b.do(t, "GET", "/api/v1/batches?state=done", b.alice, nil).want(t, "list done", http.StatusOK)
	b.do(t, "GET", "/api/v1/batches?state=nope", b.alice, nil).want(t, "list with bad state", http.StatusBadRequest)
	b.do(t, "GET", "/api/v1/batches?limit=0", b.alice, nil).want(t, "list with bad limit", http.StatusBadRequest)

	// Job cancel: only one's own jobs, and only once.
	b.do(t, "POST", "/api/v1/jobs/bob1_j0/cancel", b.alice, nil).want(t, "cancel another user's job", http.StatusNotFound)
	b.do(t, "POST", "/api/v1/jobs/nosuch/cancel", b.alice, nil).want(t, "cancel a missing job", http.StatusNotFound)
	b.do(t, "POST", "/api/v1/jobs/b1_j0/cancel", b.alice, nil).want(t, "cancel own job", http.StatusOK)
	b.do(t, "POST", "/api/v1/jobs/b1_j0/cancel", b.alice, nil).want(t, "cancel it again", http.StatusConflict)
	if wu, _ := b.st.WorkunitGetByName(ctx, "b1_j0"); wu.ErrorMask != state.ErrCancelled {
		t.Fatalf("cancelled job has error mask %v", wu.ErrorMask)
	}

	b.do(t, "POST", path+"/cancel", b.bob, nil).want(t, "cancel another user's batch", http.StatusNotFound)
	r = b.do(t, "POST", path+"/cancel", b.alice, nil)
	r.want(t, "cancel batch", http.StatusOK)
	var cr submitapi.CancelResponse
	if err := json.Unmarshal(r.body, &cr); err != nil || cr.CancelledJobs != 1 || cr.Batch.State != "cancelled" ||
		cr.Batch.Counts.Cancelled != 2 {
		t.Fatalf("cancel answer = %s; want 1 job stopped, batch cancelled with 2 cancelled jobs", r.body)
	}
	b.do(t, "GET", path+"/cancel", b.alice, nil).want(t, "GET on a POST endpoint", http.StatusMethodNotAllowed)
	b.do(t, "GET", "/api/v1/nothing", b.alice, nil).want(t, "unknown endpoint", http.StatusNotFound)
	if got := b.metric(t, "taskserver_scheduler_submit_api_requests_total", "route", "batch", "code", "404"); got != 3 {
		t.Errorf("requests{batch,404} = %g, want 3", got)
	}
}

func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, 2048)
	tests := []struct {
		name string
		body any
		want int
	}{
		{"empty body", "", http.StatusBadRequest},
		{"not JSON", "{", http.StatusBadRequest},
		{"trailing data", `{"app":"demo","name":"t","jobs":[{"input":""}]} {}`, http.StatusBadRequest},
		{"unknown field", `{"app":"demo","name":"t","jobz":[]}`, http.StatusBadRequest},
		{"bad base64", `{"app":"demo","name":"t","jobs":[{"input":"!!"}]}`, http.StatusBadRequest},
		{"no jobs", `{"app":"demo","name":"t","jobs":[]}`, http.StatusBadRequest},
		{"bad name", submission("a b", "x"), http.StatusBadRequest},
		{"unknown app", `{"app":"nosuch","name":"t","jobs":[{"input":""}]}`, http.StatusBadRequest},
		{"bad parameters", `{"app":"demo","name":"t","jobs":[{"input":""}],"params":{"min_quorum":0}}`, http.StatusBadRequest},
		{"body too large", submission("big", strings.Repeat("x", 3000)), http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		b.do(t, "POST", "/api/v1/batches", b.alice, tc.body).want(t, tc.name, tc.want)
	}
	// A job without a name is named by its index.
	b.do(t, "POST", "/api/v1/batches", b.alice, `{"app":"demo","name":"anon","jobs":[{"input":""},{"input":""}]}`).
		want(t, "unnamed jobs", http.StatusCreated)
	if _, err := b.st.WorkunitGetByName(context.Background(), "anon_1"); err != nil {
		t.Fatalf("unnamed job 1: %v", err)
	}
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	r := b.do(t, "POST", "/api/v1/batches", b.alice, submission("out", "x"))
	r.want(t, "submit", http.StatusCreated)
	var res submitapi.SubmitResponse
	_ = json.Unmarshal(r.body, &res)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET assimilate_state = ? WHERE name = 'out_j0'`, state.AssimilateDone); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(b.resultsDir, "out_j0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.resultsDir, "out_j0", "out"), []byte("the answer"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/batches/" + strconv.FormatInt(res.Batch.ID, 10) + "/outputs"
	b.do(t, "GET", path, b.bob, nil).want(t, "another user's outputs", http.StatusNotFound)
	r = b.do(t, "GET", path, b.alice, nil)
	r.want(t, "outputs", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/gzip" {
		t.Fatalf("outputs Content-Type %q", ct)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil || h.Name != "out/out_j0/out" {
		t.Fatalf("first tar entry = %+v, %v; want out/out_j0/out", h, err)
	}
	if body, _ := io.ReadAll(tr); string(body) != "the answer" {
		t.Fatalf("out_j0 in the tar = %q", body)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("after the only file: %v, want EOF", err)
	}
}
