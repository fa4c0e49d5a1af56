package submitapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Prefix is the path under which the API is served.
const Prefix = "/api/v1/"

// DefaultMaxBodyBytes bounds a request body when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 64 << 20

// maxKeyLen bounds a bearer token before any lookup: API keys are 64 hex
// characters.
const maxKeyLen = 256

// Users is what the API needs to authenticate callers.
type Users interface {
	UserGetByAPIKeyHash(ctx context.Context, hash string) (row.User, error)
}

// NewKey returns a new submission API key, shown to its owner once, and
// its hash, which is all the database keeps (user.api_key_hash).
func NewKey() (key, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("make API key: %w", err)
	}
	key = hex.EncodeToString(b[:])
	return key, KeyHash(key), nil
}

// KeyHash is the hash of an API key as the database keeps it: SHA-256 hex.
// The key has 256 random bits, so a fast hash is enough: nobody can guess
// keys from their hashes, and whoever reads the table cannot use them.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Options configure the API.
type Options struct {
	Batches *batch.Service
	Users   Users
	// MaxBodyBytes bounds a request body (inputs are base64, a third
	// larger than the files); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Defaults are the job parameters a submission does not give; the zero
	// value means jobs.DefaultParams().
	Defaults jobs.Params
	Logger   *slog.Logger
	Metrics  *Metrics
}

// API serves the submission endpoints.
type API struct {
	o   Options
	log *slog.Logger
	m   *Metrics
	mux *http.ServeMux
}

// New returns the API, to be mounted at Prefix.
func New(o Options) (*API, error) {
	if o.Batches == nil || o.Users == nil {
		return nil, errors.New("submission API: Batches and Users are required")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Defaults == (jobs.Params{}) {
		o.Defaults = jobs.DefaultParams()
	}
	if err := o.Defaults.Validate(); err != nil {
		return nil, fmt.Errorf("submission API default job parameters: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	a := &API{o: o, log: o.Logger, m: o.Metrics, mux: http.NewServeMux()}
	a.route("/api/v1/batches", "batches", map[string]handler{http.MethodPost: a.submit, http.MethodGet: a.list})
	a.route("/api/v1/batches/{id}", "batch", map[string]handler{http.MethodGet: a.status})
	a.route("/api/v1/batches/{id}/cancel", "batch_cancel", map[string]handler{http.MethodPost: a.cancel})
	a.route("/api/v1/batches/{id}/outputs", "batch_outputs", map[string]handler{http.MethodGet: a.outputs})
	a.route("/api/v1/jobs/{name}/cancel", "job_cancel", map[string]handler{http.MethodPost: a.cancelJob})
	a.route("/api/v1/jobs/{name}/outputs", "job_outputs", map[string]handler{http.MethodGet: a.jobOutputs})
	a.route("/api/v1/jobs/{name}/outputs/{file}", "job_output", map[string]handler{http.MethodGet: a.jobOutput})
	a.route("/api/v1/files", "files", map[string]handler{http.MethodPost: a.stageFile})
	a.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		a.m.requests.WithLabelValues("unknown", "404").Inc()
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	return a, nil
}

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// handler serves one authenticated request and returns the status it wrote.
type handler func(w http.ResponseWriter, r *http.Request, u row.User) int

// route serves pattern with one handler per method; name labels metrics.
func (a *API) route(pattern, name string, methods map[string]handler) {
	var allowed []string
	for m := range methods {
		allowed = append(allowed, m)
	}
	sort.Strings(allowed)
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		code := a.serve(w, r, methods, allowed)
		a.m.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
	})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, methods map[string]handler, allowed []string) int {
	h, ok := methods[r.Method]
	if !ok {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		return writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use "+strings.Join(allowed, " or "))
	}
	u, code, msg := a.authenticate(r)
	if code != 0 {
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskserver"`)
		}
		return writeError(w, code, msg)
	}
	r.Body = http.MaxBytesReader(w, r.Body, a.o.MaxBodyBytes)
	return h(w, r, u)
}

// unknownKey refuses a key that is no user's API key. An account key is
// not one: it is in every volunteer's client and lookup_account hands it
// out for a password.
const unknownKey = "unknown API key (a submitter's key is made by taskctl user apikey; the account key is not one)"

// authenticate returns the caller, or the status and message to refuse it
// with.
func (a *API) authenticate(r *http.Request) (row.User, int, string) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return row.User{}, http.StatusUnauthorized, "missing \"Authorization: Bearer <API key>\""
	}
	if len(key) > maxKeyLen {
		return row.User{}, http.StatusUnauthorized, unknownKey
	}
	// Looked up by its hash: the table holds no key, and the lookup's
	// timing says nothing about one.
	u, err := a.o.Users.UserGetByAPIKeyHash(r.Context(), KeyHash(key))
	if errors.Is(err, store.ErrNotFound) {
		return row.User{}, http.StatusUnauthorized, unknownKey
	}
	if err != nil {
		a.log.Error("submission API: look up API key", "error", err)
		return row.User{}, http.StatusInternalServerError, "internal error"
	}
	if !u.SubmitAllowed {
		return row.User{}, http.StatusForbidden, "this account may not submit jobs (ask the project for submit permission)"
	}
	return u, 0, ""
}

// SubmitRequest is the body of POST /api/v1/batches.
type SubmitRequest struct {
	App         string `json:"app"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// IdempotencyKey may come in the Idempotency-Key header instead.
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
	Jobs           []JobRequest `json:"jobs"`
	// Params override the server's default job parameters field by field;
	// a parameter the input template sets replaces the server's default.
	Params ParamsRequest `json:"params"`
	// InputTemplate and OutputTemplate are templates in BOINC's format for
	// every job of the batch; empty means the app's.
	InputTemplate  string `json:"input_template,omitempty"`
	OutputTemplate string `json:"output_template,omitempty"`
}

// JobRequest is one job of a submission. Name defaults to the job's index;
// the job is named <batch>_<name>. Inputs are its files in the input
// template's order; Input (base64) is short for one file given by its
// content, for the built-in template. Give one or the other.
type JobRequest struct {
	Name        string         `json:"name,omitempty"`
	Input       []byte         `json:"input,omitempty"`
	Inputs      []InputRequest `json:"inputs,omitempty"`
	CommandLine string         `json:"command_line,omitempty"`
}

// InputRequest is one file given to a job: exactly one of its content
// (data, base64), a shared file (shared: the name it was staged under,
// meaning the latest so staged, or the physical name POST /api/v1/files
// answered), or a file on another server (url with its md5 and nbytes).
// An empty object is an empty file.
type InputRequest struct {
	Data   []byte  `json:"data,omitempty"`
	Shared string  `json:"shared,omitempty"`
	URL    string  `json:"url,omitempty"`
	MD5    string  `json:"md5,omitempty"`
	Nbytes float64 `json:"nbytes,omitempty"`
}

// ParamsRequest are the job parameters of a submission, BOINC's names.
type ParamsRequest struct {
	RscFpopsEst    float64 `json:"rsc_fpops_est"`
	RscFpopsBound  float64 `json:"rsc_fpops_bound"`
	RscMemoryBound float64 `json:"rsc_memory_bound"`
	RscDiskBound   float64 `json:"rsc_disk_bound"`
	// DelayBound is in seconds.
	DelayBound        float64 `json:"delay_bound"`
	MinQuorum         int     `json:"min_quorum"`
	TargetNResults    int     `json:"target_nresults"`
	MaxErrorResults   int     `json:"max_error_results"`
	MaxTotalResults   int     `json:"max_total_results"`
	MaxSuccessResults int     `json:"max_success_results"`
	Priority          int     `json:"priority"`
	FixedCredit       float64 `json:"fixed_credit"`
}

func paramsRequest(p jobs.Params) ParamsRequest {
	return ParamsRequest{RscFpopsEst: p.RscFpopsEst, RscFpopsBound: p.RscFpopsBound, RscMemoryBound: p.RscMemoryBound,
		RscDiskBound: p.RscDiskBound, DelayBound: p.DelayBound.Seconds(), MinQuorum: p.MinQuorum,
		TargetNResults: p.TargetNResults, MaxErrorResults: p.MaxErrorResults, MaxTotalResults: p.MaxTotalResults,
		MaxSuccessResults: p.MaxSuccessResults, Priority: p.Priority, FixedCredit: p.FixedCredit}
}

func (p ParamsRequest) params() jobs.Params {
	return jobs.Params{RscFpopsEst: p.RscFpopsEst, RscFpopsBound: p.RscFpopsBound, RscMemoryBound: p.RscMemoryBound,
		RscDiskBound: p.RscDiskBound, DelayBound: time.Duration(p.DelayBound * float64(time.Second)),
		MinQuorum: p.MinQuorum, TargetNResults: p.TargetNResults, MaxErrorResults: p.MaxErrorResults,
		MaxTotalResults: p.MaxTotalResults, MaxSuccessResults: p.MaxSuccessResults, Priority: p.Priority,
		FixedCredit: p.FixedCredit}
}

// SubmitResponse answers a submission.
type SubmitResponse struct {
	// Created is false when the idempotency key found an earlier batch.
	Created bool         `json:"created"`
	Batch   batch.Status `json:"batch"`
}

func (a *API) submit(w http.ResponseWriter, r *http.Request, u row.User) int {
	// Fields absent from the body keep these defaults.
	req := SubmitRequest{Params: paramsRequest(a.o.Defaults)}
	if code, msg := decode(r.Body, &req); code != 0 {
		return writeError(w, code, msg)
	}
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key != "" && req.IdempotencyKey != "" && key != req.IdempotencyKey:
		return writeError(w, http.StatusBadRequest, "Idempotency-Key header and idempotency_key field differ")
	case key == "":
		key = req.IdempotencyKey
	}
	spec := batch.Spec{App: req.App, Name: req.Name, Description: req.Description, IdempotencyKey: key,
		UserID: u.ID, Params: req.Params.params(), Jobs: make([]batch.Job, len(req.Jobs)),
		InputTemplate: req.InputTemplate, OutputTemplate: req.OutputTemplate}
	for i, j := range req.Jobs {
		if j.Name == "" {
			j.Name = strconv.Itoa(i)
		}
		ins, err := j.inputs()
		if err != nil {
			return writeError(w, http.StatusBadRequest, fmt.Sprintf("job %q: %v", j.Name, err))
		}
		spec.Jobs[i] = batch.Job{Name: j.Name, Inputs: ins, CommandLine: j.CommandLine}
	}
	b, created, err := a.o.Batches.Submit(r.Context(), spec)
	if err != nil {
		return a.fail(w, err)
	}
	st, err := a.o.Batches.Status(r.Context(), b)
	if err != nil {
		return a.fail(w, err)
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		a.m.jobsSubmitted.Add(float64(b.NJobs))
		a.log.Info("batch submitted", "batch_id", b.ID, "batch", b.Name, "user_id", u.ID, "jobs", b.NJobs)
	}
	w.Header().Set("Location", Prefix+"batches/"+strconv.FormatInt(b.ID, 10))
	return writeJSON(w, code, SubmitResponse{Created: created, Batch: st})
}

// inputs are the job's files.
func (j JobRequest) inputs() ([]jobs.Input, error) {
	if j.Inputs == nil {
		return []jobs.Input{{Data: j.Input}}, nil
	}
	if j.Input != nil {
		return nil, errors.New(`give "input" or "inputs", not both`)
	}
	out := make([]jobs.Input, len(j.Inputs))
	for i, in := range j.Inputs {
		out[i] = jobs.Input{Data: in.Data, Shared: in.Shared, URL: in.URL, MD5: in.MD5, Nbytes: in.Nbytes}
	}
	return out, nil
}

// ListResponse answers GET /api/v1/batches.
type ListResponse struct {
	Batches []batch.Status `json:"batches"`
}

func (a *API) list(w http.ResponseWriter, r *http.Request, u row.User) int {
	q := r.URL.Query()
	p := batch.ListParams{UserID: u.ID, Limit: 100}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return writeError(w, http.StatusBadRequest, "after: want a batch id")
		}
		p.AfterID = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return writeError(w, http.StatusBadRequest, "limit: want 1..1000")
		}
		p.Limit = n
	}
	if v := q.Get("state"); v != "" {
		s, ok := parseState(v)
		if !ok {
			return writeError(w, http.StatusBadRequest, "state: want in_progress, done or cancelled")
		}
		p.State = s
	}
	list, err := a.o.Batches.List(r.Context(), p)
	if err != nil {
		return a.fail(w, err)
	}
	return writeJSON(w, http.StatusOK, ListResponse{Batches: list})
}

func parseState(s string) (row.BatchState, bool) {
	for _, st := range []row.BatchState{row.BatchInProgress, row.BatchDone, row.BatchCancelled} {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// ownBatch returns the batch named by the path's {id} if u submitted it;
// otherwise it writes 404 and returns a non-zero status.
func (a *API) ownBatch(w http.ResponseWriter, r *http.Request, u row.User) (row.Batch, int) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return row.Batch{}, writeError(w, http.StatusNotFound, "no such batch")
	}
	b, err := a.o.Batches.Get(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && b.UserID != u.ID) {
		return row.Batch{}, writeError(w, http.StatusNotFound, "no such batch")
	}
	if err != nil {
		return row.Batch{}, a.fail(w, err)
	}
	return b, 0
}

func (a *API) status(w http.ResponseWriter, r *http.Request, u row.User) int {
	b, code := a.ownBatch(w, r, u)
	if code != 0 {
		return code
	}
	st, err := a.o.Batches.Status(r.Context(), b)
	if err != nil {
		return a.fail(w, err)
	}
	return writeJSON(w, http.StatusOK, st)
}

// CancelResponse answers a batch cancel.
type CancelResponse struct {
	// CancelledJobs counts the jobs this request stopped.
	CancelledJobs int64        `json:"cancelled_jobs"`
	Batch         batch.Status `json:"batch"`
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request, u row.User) int {
	b, code := a.ownBatch(w, r, u)
	if code != 0 {
		return code
	}
	n, err := a.o.Batches.Cancel(r.Context(), b)
	if err != nil {
		return a.fail(w, err)
	}
	a.log.Info("batch cancelled", "batch_id", b.ID, "user_id", u.ID, "jobs", n)
	if b, err = a.o.Batches.Get(r.Context(), b.ID); err != nil {
		return a.fail(w, err)
	}
	st, err := a.o.Batches.Status(r.Context(), b)
	if err != nil {
		return a.fail(w, err)
	}
	return writeJSON(w, http.StatusOK, CancelResponse{CancelledJobs: n, Batch: st})
}

// countingWriter tells whether anything reached the client.
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (a *API) outputs(w http.ResponseWriter, r *http.Request, u row.User) int {
	b, code := a.ownBatch(w, r, u)
	if code != 0 {
		return code
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", `attachment; filename="`+b.Name+`.tar.gz"`)
	cw := &countingWriter{w: w}
	n, err := a.o.Batches.WriteTarGz(r.Context(), b, cw)
	if err != nil {
		if cw.n == 0 {
			w.Header().Del("Content-Disposition")
			return a.fail(w, err)
		}
		// Too late for a status: the archive is left unfinished, which
		// the client's gzip reader reports.
		a.log.Warn("submission API: outputs stream failed", "batch_id", b.ID, "error", err)
		return http.StatusOK
	}
	a.log.Debug("outputs sent", "batch_id", b.ID, "files", n)
	return http.StatusOK
}

// FileResponse answers POST /api/v1/files.
type FileResponse struct {
	// Name is the shared file's physical name, <name>_<md5>: a job whose
	// input is {"shared": Name} gets exactly this content.
	Name          string  `json:"name"`
	MD5           string  `json:"md5"`
	Nbytes        float64 `json:"nbytes"`
	GzippedNbytes float64 `json:"gzipped_nbytes,omitempty"`
}

// stageFile stages the request body as shared file ?name=, with a gzip'd
// copy if ?gzip=1.
func (a *API) stageFile(w http.ResponseWriter, r *http.Request, u row.User) int {
	q := r.URL.Query()
	name := q.Get("name")
	if name == "" {
		return writeError(w, http.StatusBadRequest, "name: want the shared file's name (?name=NAME)")
	}
	gz := false
	if v := q.Get("gzip"); v != "" {
		var err error
		if gz, err = strconv.ParseBool(v); err != nil {
			return writeError(w, http.StatusBadRequest, "gzip: want 0 or 1")
		}
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return a.fail(w, err)
	}
	f, err := a.o.Batches.StageShared(r.Context(), name, data, gz)
	if err != nil {
		return a.fail(w, err)
	}
	a.log.Info("shared file staged", "file", f.Name, "user_id", u.ID, "bytes", f.Nbytes)
	return writeJSON(w, http.StatusCreated, FileResponse{Name: f.Name, MD5: f.MD5, Nbytes: f.Nbytes, GzippedNbytes: f.GzippedNbytes})
}

// ownJob returns the job the path's {name} names if it is of one of u's
// batches; otherwise it writes 404 and returns a non-zero status.
// Known-answer jobs (batch 0) and other people's jobs look missing.
func (a *API) ownJob(w http.ResponseWriter, r *http.Request, u row.User) (row.Workunit, row.Batch, int) {
	wu, err := a.o.Batches.Job(r.Context(), r.PathValue("name"))
	if errors.Is(err, store.ErrNotFound) || (err == nil && wu.Batch == 0) {
		return wu, row.Batch{}, writeError(w, http.StatusNotFound, "no such job")
	}
	if err != nil {
		return wu, row.Batch{}, a.fail(w, err)
	}
	b, err := a.o.Batches.Get(r.Context(), wu.Batch)
	if errors.Is(err, store.ErrNotFound) || (err == nil && b.UserID != u.ID) {
		return wu, b, writeError(w, http.StatusNotFound, "no such job")
	}
	if err != nil {
		return wu, b, a.fail(w, err)
	}
	return wu, b, 0
}

// JobOutputsResponse answers GET /api/v1/jobs/{name}/outputs.
type JobOutputsResponse struct {
	Job string `json:"job"`
	// Done says the job was assimilated: its outputs (or its error) are
	// final. Until then Outputs is empty.
	Done bool `json:"done"`
	// Error names the error bits of a job that failed.
	Error   string           `json:"error,omitempty"`
	Outputs []OutputResponse `json:"outputs"`
}

// OutputResponse is one output of a job.
type OutputResponse struct {
	// Name is the output's logical name (its open name in the output
	// template); URL is where to get it.
	Name string `json:"name"`
	Size int64  `json:"size"`
	URL  string `json:"url"`
}

func (a *API) jobOutputs(w http.ResponseWriter, r *http.Request, u row.User) int {
	wu, _, code := a.ownJob(w, r, u)
	if code != 0 {
		return code
	}
	files, err := a.o.Batches.JobOutputs(r.Context(), wu)
	if err != nil {
		return a.fail(w, err)
	}
	resp := JobOutputsResponse{Job: wu.Name, Done: wu.AssimilateState == state.AssimilateDone, Outputs: []OutputResponse{}}
	for _, f := range files {
		if f.Logical == "" {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return a.fail(w, err)
			}
			resp.Error = strings.TrimSpace(string(b))
			continue
		}
		resp.Outputs = append(resp.Outputs, OutputResponse{Name: f.Logical, Size: f.Size,
			URL: Prefix + "jobs/" + url.PathEscape(wu.Name) + "/outputs/" + url.PathEscape(f.Logical)})
	}
	return writeJSON(w, http.StatusOK, resp)
}

// jobOutput sends one output of a job, by its logical name.
func (a *API) jobOutput(w http.ResponseWriter, r *http.Request, u row.User) int {
	wu, _, code := a.ownJob(w, r, u)
	if code != 0 {
		return code
	}
	files, err := a.o.Batches.JobOutputs(r.Context(), wu)
	if err != nil {
		return a.fail(w, err)
	}
	for _, f := range files {
		if f.Logical == "" || f.Logical != r.PathValue("file") {
			continue
		}
		in, err := os.Open(f.Path)
		if err != nil {
			return a.fail(w, err)
		}
		defer in.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
		w.WriteHeader(http.StatusOK)
		// The header fixed the length: a short copy shows as a short body.
		if _, err := io.CopyN(w, in, f.Size); err != nil {
			a.log.Warn("submission API: output stream failed", "job", wu.Name, "file", f.Logical, "error", err)
		}
		return http.StatusOK
	}
	return writeError(w, http.StatusNotFound, "no such output (not assimilated yet, or not an output of this job)")
}

// JobCancelResponse answers a job cancel.
type JobCancelResponse struct {
	Job       string `json:"job"`
	Cancelled bool   `json:"cancelled"`
}

func (a *API) cancelJob(w http.ResponseWriter, r *http.Request, u row.User) int {
	wu, b, code := a.ownJob(w, r, u)
	if code != 0 {
		return code
	}
	if err := a.o.Batches.CancelJob(r.Context(), wu); err != nil {
		return a.fail(w, err)
	}
	a.log.Info("job cancelled", "workunit_id", wu.ID, "batch_id", b.ID, "user_id", u.ID)
	return writeJSON(w, http.StatusOK, JobCancelResponse{Job: wu.Name, Cancelled: true})
}

// decode reads one JSON value from body into v, refusing unknown fields and
// trailing data. It returns 0 or the status and message to answer with.
func decode(body io.Reader, v any) (int, string) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON value")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, "empty request body; want a JSON object"
	default:
		return http.StatusBadRequest, "bad JSON: " + err.Error()
	}
}

// fail answers err with its status; unexpected errors are logged and not
// shown.
func (a *API) fail(w http.ResponseWriter, err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, batch.ErrInvalid):
		return writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, batch.ErrTooLarge), errors.As(err, &tooBig):
		return writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, batch.ErrKeyReused):
		return writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, batch.ErrExists), errors.Is(err, batch.ErrNotCancellable):
		return writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, store.ErrNotFound):
		return writeError(w, http.StatusNotFound, "not found")
	case errors.Is(err, batch.ErrNoResultsDir):
		return writeError(w, http.StatusNotImplemented, "this server does not serve outputs")
	case errors.Is(err, context.Canceled):
		return 499 // the client went away; nobody reads the answer
	default:
		a.log.Error("submission API request failed", "error", err)
		return writeError(w, http.StatusInternalServerError, "internal error")
	}
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) int {
	return writeJSON(w, code, ErrorResponse{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // a client that went away is not our error
	return code
}
