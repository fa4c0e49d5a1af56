package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/submitapi"
)

// Settings of the policies run.
const (
	polHosts      = 30
	polUsers      = 30 // one per host: a job unlucky with bad hosts never runs out of users
	polFailFrac   = 0.2
	polCheatFrac  = 0.3
	polTrustValid = 3 // scheduler --ar-trust-valid
	polQuarantine = 3 // scheduler --quarantine-streak
	polKAFraction = 0.1
	polMainJobs   = 150
	polCancelJobs = 250
	// polTrustedHosts is how many hosts must be trusted before the main
	// batch is submitted, so that some of its jobs run once.
	polTrustedHosts = 6
	polHoldJobs     = 3
	// polCancelAfter is how many jobs of the batch to cancel must be
	// assimilated before the test cancels it: mid-run, some done, most not.
	polCancelAfter = 10
	// polCancelValidating is how many of its jobs should await validation
	// when the batch is cancelled.
	polCancelValidating = 10
	polTimeout          = 150 * time.Second
	polFpopsEst         = 1e12
	polFlops            = 1e12

	polMainBatch   = "main"
	polCancelBatch = "cancelme"
	polHoldBatch   = "holdme"
	polMainKey     = "main-try-1"
)

// TestPoliciesEndToEnd runs one project with every daemon a process, the
// operator's actions done with the taskctl binary, the science submitted as
// batches over the HTTP submission API, and simulated hosts of which some
// fail every task and some cheat. The demo app is configured for adaptive
// replication, median credit, known-answer jobs and holding failed jobs; the
// scheduler trusts a host after 3 valid results and quarantines it after 3
// errors. Before the hosts start, a scientist submits a batch of jobs that
// fail everywhere and a large batch that will be cancelled; once a few hosts
// are trusted, the main batch, twice with one idempotency key, so that some
// of its jobs run once; then the large batch is cancelled over the API. The
// jobs that fail are driven through a hold, a requeue (by name and by
// reason), a second hold and a cancel. At the end the test checks, from the
// database, the files and the API: idempotent submission, cancellation,
// adaptive replication, known answers, holds, quarantine, credit, and the
// main batch's completion and outputs. POLICIES_SEED repeats a run's host
// population.
func TestPoliciesEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	seed := uint64(envInt(t, "POLICIES_SEED", int(rand.Uint32())))
	t.Logf("policies run: %d hosts (fail %g, cheat %g), seed %d (POLICIES_SEED to repeat)", polHosts, polFailFrac, polCheatFrac, seed)
	bin := buildPrograms(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := &polRun{lcProject: newLCProject(t, bin, lcParams{Users: polUsers}), hc: &http.Client{Timeout: 30 * time.Second}}
	defer r.hc.CloseIdleConnections()
	start := time.Now()
	r.writeConfig()
	r.configure(ctx)
	r.startDaemons(ctx)
	r.submitFirst(ctx)
	r.startSim(seed)
	if err := r.drive(ctx); err != nil {
		r.reportStuck(ctx)
		r.dumpLogs()
		t.Fatalf("driving the run: %v", err)
	}
	t.Logf("%5.0fs  every job assimilated, every instance over", time.Since(start).Seconds())
	r.checkMainBatchAPI(ctx)
	if err := r.stopSim(); err != nil {
		t.Errorf("simclient: %v", err)
	}
	if _, err := r.waitQuiet(ctx, r.jobCount(ctx), 60*time.Second, 15*time.Second); err != nil {
		r.reportStuck(ctx)
		r.dumpLogs()
		t.Fatalf("settling after the hosts stopped: %v", err)
	}
	if err := r.stopAll(); err != nil {
		t.Errorf("stopping the daemons: %v", err)
	}
	d, err := r.collectPolicies(ctx)
	if err != nil {
		t.Fatalf("reading the final state: %v", err)
	}
	s := r.check(d)
	t.Logf("policies summary (%.0fs): %s", time.Since(start).Seconds(), s)
	for _, b := range s.Broken(5) {
		t.Errorf("%s", b)
	}
	if t.Failed() {
		r.dumpLogs()
	}
}

// polRun is the policies run: the lifecycle test's project with its own
// daemon flags, and what the run did for the checks to compare against.
type polRun struct {
	*lcProject
	hc     *http.Client
	apiURL string // .../api/v1/
	apiKey string // the scientist's submission API key

	mainID, cancelID, holdID int64
	// cancelled is the API's answer to the batch cancel.
	cancelled submitapi.CancelResponse
	// holdJobs are the names of the jobs that fail everywhere.
	holdJobs []string
	// holdSeen counts the holds observed per hold job (1 then 2).
	holdSeen map[string]int
	// requeued are the other held jobs the test released by name.
	requeued map[string]int
	// mainOutputs are the files of the first batch's tar.gz, by entry name.
	mainOutputs map[string][]byte
}

// taskctl runs the operator tool on the project and returns its standard
// output.
func (r *polRun) taskctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.bin, "taskctl"), append([]string{"--config", r.config}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("taskctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (r *polRun) mustTaskctl(ctx context.Context, args ...string) string {
	r.t.Helper()
	out, err := r.taskctl(ctx, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// configure sets the app's policies, adds the known answers and creates the
// scientist's account, all with taskctl and before any daemon starts, so
// none of them caches the old app row.
func (r *polRun) configure(ctx context.Context) {
	t := r.t
	out := r.mustTaskctl(ctx, "app", "set", "--name", demoapp.AppName, "--adaptive-replication", "--credit-policy", "median",
		"--known-answer-fraction", ftoa(polKAFraction), "--hold-failed-jobs")
	t.Logf("taskctl app set: %s", strings.TrimSpace(out))
	dir := filepath.Join(r.dir, "known")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		in := demoapp.Input(fmt.Sprintf("known-answer-%d", i))
		inFile, outFile := filepath.Join(dir, fmt.Sprintf("ka%d.in", i)), filepath.Join(dir, fmt.Sprintf("ka%d.out", i))
		if err := os.WriteFile(inFile, in, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(outFile, demoapp.Compute(in, demoapp.Rounds), 0o644); err != nil {
			t.Fatal(err)
		}
		r.mustTaskctl(ctx, "known-answer", "add", "--app", demoapp.AppName, "--name", fmt.Sprintf("ka%d", i),
			"--input", inFile, "--output", outFile)
	}
	r.mustTaskctl(ctx, "user", "create", "--email", "scientist@example.org", "--name", "scientist", "--submit-allowed")
	r.apiKey = strings.TrimSpace(r.mustTaskctl(ctx, "user", "apikey", "--email", "scientist@example.org"))
	if len(r.apiKey) < 16 || strings.ContainsAny(r.apiKey, " \n") {
		t.Fatalf("taskctl user apikey printed %q, want one API key", r.apiKey)
	}
}

// startDaemons launches every daemon but the work generator: all work comes
// from batches.
func (r *polRun) startDaemons(ctx context.Context) {
	t := r.t
	t.Cleanup(func() { r.stopAll() })
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", anyPort, "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", anyPort, "--listen", anyPort, "--url-base", "",
			"--upload-key", filepath.Join(r.dir, "keys", "upload_private"), "--request-delay", "1s",
			"--submit-api", "--results-dir", r.outDir,
			"--ar-trust-valid", strconv.Itoa(polTrustValid), "--quarantine-streak", strconv.Itoa(polQuarantine)}},
		{"transitioner.0", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "0", "--sleep", "300ms", "--tail-interval", "1s"}},
		{"transitioner.1", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "1", "--sleep", "300ms", "--tail-interval", "1s"}},
		{"validator", "validator", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"assimilator", "assimilator", []string{"--listen", anyPort, "--sleep", "300ms",
			"--handler-cmd", filepath.Join(r.dir, "handler.sh")}},
		{"file_deleter", "file_deleter", []string{"--listen", anyPort, "--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--listen", anyPort, "--sleep", "1s", "--archive-dir", "archives", "--min-age", "24h"}},
	}
	for _, s := range steps {
		pr := r.startDaemon(ctx, s.name, s.program, s.args...)
		if s.name == "scheduler" {
			r.apiURL = "http://" + r.schedulerListens(ctx, pr) + submitapi.Prefix
		}
	}
}

func (r *polRun) startSim(seed uint64) {
	args := []string{"--url", r.schedURL, "--authenticators", r.authFile, "--hosts", strconv.Itoa(polHosts),
		"--fail-frac", ftoa(polFailFrac), "--cheat-frac", ftoa(polCheatFrac), "--flops", ftoa(polFlops),
		"--compute-time", "100ms", "--backoff-scale", "0.01", "--backoff-max", "3s", "--seed", strconv.FormatUint(seed, 10),
		"--ack-log", r.ackLog, "--report", filepath.Join(r.dir, "simclient-report.json"), "--summary-every", "30s"}
	var err error
	if r.sim, err = projectrun.Start(projectrun.Spec{Name: "simclient", Bin: filepath.Join(r.bin, "simclient"), LogDir: filepath.Join(r.dir, "logs"), Args: args}); err != nil {
		r.t.Fatal(err)
	}
}

// api sends one request to the submission API as the scientist and returns
// the status and body.
func (r *polRun) api(ctx context.Context, method, path string, body any, header map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.apiURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// apiJSON is api for a JSON answer with the wanted status, decoded into out.
func (r *polRun) apiJSON(ctx context.Context, method, path string, body any, header map[string]string, want int, out any) {
	r.t.Helper()
	code, b, err := r.api(ctx, method, path, body, header)
	if err != nil {
		r.t.Fatal(err)
	}
	if code != want {
		r.t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, code, want, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		r.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
	}
}

// polParams are the job parameters of a batch.
func polParams(delay time.Duration, quorum, maxErr, maxTotal, maxSuccess, priority int) submitapi.ParamsRequest {
	return submitapi.ParamsRequest{RscFpopsEst: polFpopsEst, RscMemoryBound: 1e8, RscDiskBound: 1e9,
		DelayBound: delay.Seconds(), MinQuorum: quorum, TargetNResults: quorum, MaxErrorResults: maxErr,
		MaxTotalResults: maxTotal, MaxSuccessResults: maxSuccess, Priority: priority}
}

// submitFirst submits, before any host runs, the hold batch (jobs that
// fail everywhere: their inputs start with FAIL, and since the simulated
// hosts do not run the demo program, their staged input files are deleted
// so that every host fails to download them) and the batch to cancel, whose
// jobs also make the honest hosts trusted.
func (r *polRun) submitFirst(ctx context.Context) {
	hold := submitapi.SubmitRequest{App: demoapp.AppName, Name: polHoldBatch, Description: "jobs that fail everywhere",
		Params: polParams(30*time.Second, 1, 1, 4, 1, 10)}
	for i := range polHoldJobs {
		name := strconv.Itoa(i)
		hold.Jobs = append(hold.Jobs, submitapi.JobRequest{Name: name, Input: append([]byte("FAIL\n"), demoapp.Input(batch.JobName(polHoldBatch, name))...)})
		r.holdJobs = append(r.holdJobs, batch.JobName(polHoldBatch, name))
	}
	var resp submitapi.SubmitResponse
	r.apiJSON(ctx, http.MethodPost, "batches", hold, nil, http.StatusCreated, &resp)
	r.holdID = resp.Batch.ID
	r.breakInputs(ctx, r.holdID)

	cancel := submitapi.SubmitRequest{App: demoapp.AppName, Name: polCancelBatch, Jobs: jobsOf(polCancelBatch, polCancelJobs),
		Params: polParams(20*time.Second, 2, 3, 10, 6, 0)}
	r.apiJSON(ctx, http.MethodPost, "batches", cancel, map[string]string{"Idempotency-Key": "cancel-try-1"}, http.StatusCreated, &resp)
	r.cancelID = resp.Batch.ID
}

// submitMain submits the main batch twice with one idempotency key: the
// second answer must be the first batch, created once.
func (r *polRun) submitMain(ctx context.Context) {
	main := submitapi.SubmitRequest{App: demoapp.AppName, Name: polMainBatch, Jobs: jobsOf(polMainBatch, polMainJobs),
		Params: polParams(2*time.Minute, 2, 3, 10, 6, 0)}
	var first, again submitapi.SubmitResponse
	r.apiJSON(ctx, http.MethodPost, "batches", main, map[string]string{"Idempotency-Key": polMainKey}, http.StatusCreated, &first)
	r.apiJSON(ctx, http.MethodPost, "batches", main, map[string]string{"Idempotency-Key": polMainKey}, http.StatusOK, &again)
	if !first.Created || again.Created || first.Batch.ID != again.Batch.ID || first.Batch.Counts.Jobs != polMainJobs ||
		again.Batch.Counts.Jobs != first.Batch.Counts.Jobs {
		r.t.Errorf("submission repeated with one idempotency key: first created=%t id=%d jobs=%d, again created=%t id=%d jobs=%d; want the same batch of %d jobs, created once",
			first.Created, first.Batch.ID, first.Batch.Counts.Jobs, again.Created, again.Batch.ID, again.Batch.Counts.Jobs, polMainJobs)
	}
	r.mainID = first.Batch.ID
}

// jobsOf are n jobs whose inputs are the demo inputs of their full names, so
// their correct outputs are demoapp.SingleOutput(full name).
func jobsOf(batchName string, n int) []submitapi.JobRequest {
	out := make([]submitapi.JobRequest, n)
	for i := range out {
		name := strconv.Itoa(i)
		out[i] = submitapi.JobRequest{Name: name, Input: demoapp.Input(batch.JobName(batchName, name))}
	}
	return out
}

// breakInputs deletes the staged input files of batch batchID's own jobs.
// A known-answer job mixed into the batch is named like them, input file
// included, so the files are found by the jobs' rows, not by their names.
func (r *polRun) breakInputs(ctx context.Context, batchID int64) {
	inputs := map[string]bool{}
	err := query(ctx, r.db, fmt.Sprintf(`SELECT xml_doc FROM workunit WHERE batch = %d AND known_answer_id = 0`, batchID), func(rows *sql.Rows) error {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return err
		}
		wu, err := jobxml.ParseWorkunit(doc)
		if err != nil {
			return err
		}
		for _, in := range wu.Inputs {
			inputs[in.Name] = true
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("reading the hold jobs' inputs: %v", err)
	}
	n := 0
	err = filepath.WalkDir(filepath.Join(r.dir, "download"), func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && inputs[e.Name()] {
			n++
			return os.Remove(path)
		}
		return err
	})
	if err != nil || n != polHoldJobs || len(inputs) != polHoldJobs {
		r.t.Fatalf("deleting the hold jobs' inputs: removed %d files of %d, want %d: %v", n, len(inputs), polHoldJobs, err)
	}
}

// drive runs the scientist's and the operator's side until every job is
// assimilated and every instance over: once enough hosts are trusted it
// submits the main batch, then cancels the other batch mid-run; it walks the
// hold jobs through hold, requeue, hold and cancel, and releases any other
// held job.
func (r *polRun) drive(ctx context.Context) error {
	t := r.t
	r.holdSeen, r.requeued = map[string]int{}, map[string]int{}
	start := time.Now()
	lastLog, lastJanitor := start, start
	submitted, cancelled, holdsDone := false, false, false
	var submittedAt time.Time
	for {
		if err := r.died(); err != nil {
			return err
		}
		if time.Since(start) > polTimeout {
			g, _ := r.progress(ctx)
			return fmt.Errorf("not done after %s (main submitted %t, cancelled %t, holds done %t): %s",
				polTimeout, submitted, cancelled, holdsDone, g)
		}
		if !submitted {
			var n int
			if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM host WHERE consecutive_valid >= ? AND error_streak = 0`, polTrustValid).Scan(&n); err != nil {
				return err
			}
			if n >= polTrustedHosts {
				r.submitMain(ctx)
				t.Logf("%5.0fs  %d hosts trusted: submitted batch %s (id %d) twice with one idempotency key", time.Since(start).Seconds(), n, polMainBatch, r.mainID)
				submitted, submittedAt = true, time.Now()
			}
		}
		if submitted && !cancelled {
			var done, unfinished, validating int
			if err := r.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(assimilate_state = 2), 0),
				COALESCE(SUM(canonical_resultid = 0 AND error_mask = 0), 0), COALESCE(SUM(need_validate = 1), 0)
				FROM workunit WHERE batch = ?`, r.cancelID).Scan(&done, &unfinished, &validating); err != nil {
				return err
			}
			// Cancel while jobs await the validator (or a while after
			// the main batch, at the latest): a verdict racing the cancel
			// must not give a cancelled job a result.
			if done >= polCancelAfter && (validating >= polCancelValidating || time.Since(submittedAt) > 10*time.Second) {
				if unfinished == 0 {
					return fmt.Errorf("batch %s finished before it could be cancelled", polCancelBatch)
				}
				r.apiJSON(ctx, http.MethodPost, "batches/"+strconv.FormatInt(r.cancelID, 10)+"/cancel", nil, nil, http.StatusOK, &r.cancelled)
				t.Logf("%5.0fs  cancelled batch %s over the API with %d of its jobs assimilated, %d unfinished, %d awaiting validation: %d jobs stopped, state %s",
					time.Since(start).Seconds(), polCancelBatch, done, unfinished, validating, r.cancelled.CancelledJobs, r.cancelled.Batch.State)
				cancelled = true
			}
		}
		if !holdsDone {
			done, err := r.stepHolds(ctx)
			if err != nil {
				return err
			}
			holdsDone = done
		}
		if time.Since(lastJanitor) >= time.Second {
			lastJanitor = time.Now()
			if err := r.releaseOthers(ctx); err != nil {
				return err
			}
		}
		g, err := r.progress(ctx)
		if err != nil {
			return err
		}
		mainState := 0
		if submitted {
			if err := r.db.QueryRowContext(ctx, `SELECT state FROM batch WHERE id = ?`, r.mainID).Scan(&mainState); err != nil {
				return err
			}
		}
		if cancelled && holdsDone && g.Unassimilated == 0 && g.NeedValidate == 0 && g.NotOver == 0 && mainState == 2 {
			return nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			t.Logf("%5.0fs  %s; main batch state %d", time.Since(start).Seconds(), g, mainState)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// heldJob is a held job as the test sees it.
type heldJob struct {
	ID                        int64
	Name                      string
	Reason, Mask              state.ErrorMask
	HoldTime                  int64
	Assimilate                state.AssimilateState
	MaxError, Errors, NotOver int
}

func (r *polRun) heldJobs(ctx context.Context) (map[string]heldJob, error) {
	out := map[string]heldJob{}
	err := query(ctx, r.db, `SELECT w.id, w.name, w.hold_reason, w.error_mask, w.hold_time, w.assimilate_state, w.max_error_results,
		COALESCE(SUM(res.outcome IN (3, 4, 6, 7) AND res.server_state = 5), 0), COALESCE(SUM(res.server_state <> 5), 0)
		FROM workunit w LEFT JOIN result res ON res.workunitid = w.id WHERE w.hold_reason <> 0 GROUP BY w.id`, func(rows *sql.Rows) error {
		var h heldJob
		err := rows.Scan(&h.ID, &h.Name, &h.Reason, &h.Mask, &h.HoldTime, &h.Assimilate, &h.MaxError, &h.Errors, &h.NotOver)
		out[h.Name] = h
		return err
	})
	return out, err
}

// stepHolds moves the hold jobs on: once all are held (limits as
// submitted), it releases one by name and the others by reason; once all
// are held again (limits doubled), it cancels them. It reports whether the
// cancels are done.
func (r *polRun) stepHolds(ctx context.Context) (bool, error) {
	t := r.t
	held, err := r.heldJobs(ctx)
	if err != nil {
		return false, err
	}
	round := 0
	for _, name := range r.holdJobs {
		h, ok := held[name]
		if !ok {
			return false, nil
		}
		// Round 1 holds with the submitted limit (1), round 2 after the
		// requeue doubled it.
		switch {
		case round == 0:
			round = h.MaxError
		case round != h.MaxError:
			return false, nil // the jobs are in different rounds: wait
		}
	}
	if round != 1 && round != 2 {
		return false, fmt.Errorf("hold jobs held with max_error_results %d; want 1, then 2 after one requeue", round)
	}
	for _, name := range r.holdJobs {
		h := held[name]
		if r.holdSeen[name] >= round {
			continue
		}
		r.holdSeen[name] = round
		t.Logf("hold %d of %s: hold_reason %s, %d errors, max_error_results %d", round, name, h.Reason, h.Errors, h.MaxError)
		if h.Reason != state.ErrTooManyErrorResults || h.HoldTime == 0 || h.Mask != 0 || h.Assimilate != state.AssimilateInit ||
			h.Errors != h.MaxError+1 || h.NotOver != 0 {
			t.Errorf("hold %d of %s: hold_reason %s, hold_time %d, error_mask %s, assimilate_state %s, %d errors, %d instances not over; "+
				"want too_many_error_results, a hold time, no error bit, not handed on, max_error_results+1 = %d errors, every instance over",
				round, name, h.Reason, h.HoldTime, h.Mask, h.Assimilate, h.Errors, h.NotOver, h.MaxError+1)
		}
	}
	if round == 1 {
		out, err := r.taskctl(ctx, "job", "requeue", r.holdJobs[0])
		if err != nil {
			return false, err
		}
		t.Logf("taskctl job requeue %s: %s", r.holdJobs[0], strings.TrimSpace(out))
		out, err = r.taskctl(ctx, "job", "requeue", "--reason", state.ErrTooManyErrorResults.String())
		if err != nil {
			return false, err
		}
		t.Logf("taskctl job requeue --reason: %s", strings.TrimSpace(out))
		var n int
		if _, err := fmt.Sscanf(out, "requeued %d jobs", &n); err != nil || n < len(r.holdJobs)-1 {
			t.Errorf("taskctl job requeue --reason %s said %q; want at least the %d other hold jobs requeued", state.ErrTooManyErrorResults, out, len(r.holdJobs)-1)
		}
		return false, nil
	}
	for _, name := range r.holdJobs {
		out, err := r.taskctl(ctx, "job", "cancel", name)
		if err != nil {
			return false, err
		}
		t.Logf("taskctl job cancel %s: %s", name, strings.TrimSpace(out))
	}
	return true, nil
}

// releaseOthers requeues, by name, any held job that is not a hold job: a
// job of the other batches that ran out of limits by bad luck (failing or
// cheating hosts) must go on for its batch to finish.
func (r *polRun) releaseOthers(ctx context.Context) error {
	held, err := r.heldJobs(ctx)
	if err != nil {
		return err
	}
	for name, h := range held {
		// By exact name: a known-answer job mixed into the hold batch is
		// named like the hold jobs, and must be released like any other.
		if slices.Contains(r.holdJobs, name) {
			continue
		}
		out, err := r.taskctl(ctx, "job", "requeue", name)
		if err != nil {
			// Released meanwhile (by the requeue by reason) is fine.
			r.t.Logf("requeue %s (held for %s): %v", name, h.Reason, err)
			continue
		}
		r.requeued[name]++
		r.t.Logf("released %s (held for %s): %s", name, h.Reason, strings.TrimSpace(out))
	}
	return nil
}

func (r *polRun) jobCount(ctx context.Context) int {
	var n int
	if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workunit`).Scan(&n); err != nil {
		r.t.Fatalf("count jobs: %v", err)
	}
	return n
}

// checkMainBatchAPI reads the first batch over the API once it is done: its
// state, and its outputs as a tar.gz.
func (r *polRun) checkMainBatchAPI(ctx context.Context) {
	t := r.t
	id := strconv.FormatInt(r.mainID, 10)
	var st batch.Status
	r.apiJSON(ctx, http.MethodGet, "batches/"+id, nil, nil, http.StatusOK, &st)
	if st.State != "done" || st.CompletionTime == 0 || st.Counts.Jobs != polMainJobs || st.Counts.Done != polMainJobs ||
		st.Counts.Assimilated != polMainJobs {
		t.Errorf("GET batches/%s = %+v; want done with all %d jobs done and assimilated", id, st, polMainJobs)
	}
	code, b, err := r.api(ctx, http.MethodGet, "batches/"+id+"/outputs", nil, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET batches/%s/outputs: HTTP %d, %v: %.200s", id, code, err, b)
	}
	files, err := untarGz(b)
	if err != nil {
		t.Fatalf("outputs of batch %s: %v", polMainBatch, err)
	}
	r.mainOutputs = files
}

// untarGz returns the regular files of a tar.gz by entry name.
func untarGz(b []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar: %w", err)
		}
		c, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("tar entry %s: %w", h.Name, err)
		}
		out[h.Name] = c
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, fmt.Errorf("gzip trailer: %w", err)
	}
	return out, zr.Close()
}
