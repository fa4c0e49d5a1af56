package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/state"
)

// polJob is what the policies checks read of a job beyond lcJob.
type polJob struct {
	Batch, KnownAnswerID int64
	ReplicationQuorum    int
}

// polHost is what the policies checks read of a host beyond lcHost.
type polHost struct {
	ErrorStreak, ConsecutiveValid int
	Expavg                        float64
}

// polBatch is a batch row.
type polBatch struct {
	ID                         int64
	Name                       string
	State, NJobs               int
	CompletionTime, CancelTime int64
}

// polData is the lifecycle data plus the policy columns.
type polData struct {
	*lcData
	Job        map[int64]polJob
	Host       map[int64]polHost
	UserExpavg map[int64]float64
	Batches    map[int64]polBatch
}

func (r *polRun) collectPolicies(ctx context.Context) (*polData, error) {
	ld, err := r.collect(ctx)
	if err != nil {
		return nil, err
	}
	d := &polData{lcData: ld, Job: map[int64]polJob{}, Host: map[int64]polHost{}, UserExpavg: map[int64]float64{},
		Batches: map[int64]polBatch{}}
	err = query(ctx, r.db, `SELECT id, batch, known_answer_id, replication_quorum FROM workunit`, func(rows *sql.Rows) error {
		var id int64
		var j polJob
		err := rows.Scan(&id, &j.Batch, &j.KnownAnswerID, &j.ReplicationQuorum)
		d.Job[id] = j
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read job policy columns: %w", err)
	}
	err = query(ctx, r.db, `SELECT id, error_streak, consecutive_valid, expavg_credit FROM host`, func(rows *sql.Rows) error {
		var id int64
		var h polHost
		err := rows.Scan(&id, &h.ErrorStreak, &h.ConsecutiveValid, &h.Expavg)
		d.Host[id] = h
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read host reliability: %w", err)
	}
	err = query(ctx, r.db, `SELECT id, expavg_credit FROM user`, func(rows *sql.Rows) error {
		var id int64
		var e float64
		err := rows.Scan(&id, &e)
		d.UserExpavg[id] = e
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read user averages: %w", err)
	}
	err = query(ctx, r.db, `SELECT id, name, state, njobs, completion_time, cancel_time FROM batch`, func(rows *sql.Rows) error {
		var b polBatch
		err := rows.Scan(&b.ID, &b.Name, &b.State, &b.NJobs, &b.CompletionTime, &b.CancelTime)
		d.Batches[b.ID] = b
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read batches: %w", err)
	}
	return d, nil
}

// polSummary counts what the run exercised; violations go to the embedded
// lifecycle summary.
type polSummary struct {
	lcSummary
	Jobs, KnownAnswer, CheaterKnownAnswer, CheaterKnownAnswerInvalid int
	MainDone, CancelDone, Cancelled                                  int
	Single, Replicated                                               int
	QuarantinedHosts, QuarantinedSends                               int
	Valid, Invalid                                                   int
	Credit                                                           float64
	Requeued                                                         int
}

func (s *polSummary) String() string {
	return fmt.Sprintf("jobs=%d main_done=%d cancel_batch: done=%d cancelled=%d | AR: single=%d replicated=%d | known-answer jobs=%d, "+
		"cheater known-answer results=%d (invalid %d) | quarantined failing hosts=%d, their sends after quarantine=%d | "+
		"valid=%d invalid=%d credit=%.6g | other jobs released from hold=%d",
		s.Jobs, s.MainDone, s.CancelDone, s.Cancelled, s.Single, s.Replicated, s.KnownAnswer, s.CheaterKnownAnswer,
		s.CheaterKnownAnswerInvalid, s.QuarantinedHosts, s.QuarantinedSends, s.Valid, s.Invalid, s.Credit, s.Requeued)
}

func (r *polRun) check(d *polData) *polSummary {
	s := &polSummary{Jobs: len(d.Jobs), Requeued: len(r.requeued)}
	r.checkEveryJob(d, s)
	r.checkBatches(d, s)
	r.checkAdaptive(d, s)
	r.checkKnownAnswers(d, s)
	r.checkHolds(d, s)
	r.checkQuarantine(d, s)
	r.checkPolicyCredit(d, s)
	return s
}

// checkEveryJob: every job finished and handed over once (known-answer jobs
// never), every instance over, no cheater's output canonical.
func (r *polRun) checkEveryJob(d *polData, s *polSummary) {
	names := map[string]bool{}
	for _, j := range d.Jobs {
		names[j.Name] = true
		pj := d.Job[j.ID]
		if j.AssimilateState != state.AssimilateDone || j.NeedValidate || j.HoldReason != 0 {
			s.violate("every job finished", "assimilate_state %s, need_validate %t, hold_reason %s: %s", j.AssimilateState, j.NeedValidate, j.HoldReason, d.history(j))
		}
		if (j.CanonicalID != 0) == (j.ErrorMask != 0) {
			s.violate("success xor error", "canonical %d, error_mask %s: %s", j.CanonicalID, j.ErrorMask, d.history(j))
		}
		masks := d.Handled[j.Name]
		_, hasOut := d.Outputs[j.Name]
		switch {
		case pj.KnownAnswerID != 0:
			if len(masks) != 0 || hasOut {
				s.violate("known-answer jobs never handed over", "%s: handler ran %d times, output file %t", j.Name, len(masks), hasOut)
			}
		case len(masks) != 1:
			s.violate("assimilated exactly once", "handler ran %d times for %s (masks %v): %s", len(masks), j.Name, masks, d.history(j))
		case masks[0] != fmt.Sprint(int(j.ErrorMask)):
			s.violate("assimilated exactly once", "handler got error mask %s for %s, the database says %d", masks[0], j.Name, j.ErrorMask)
		}
		for _, res := range d.Results[j.ID] {
			if res.ServerState != state.ServerOver {
				s.violate("every instance over", "result %d is %s: %s", res.ID, res.ServerState, d.history(j))
			}
		}
		if c, ok := d.ByID[j.CanonicalID]; ok && d.Hosts[c.HostID].Kind == "cheating" {
			s.violate("no cheater canonical", "canonical result %d comes from cheating host %d: %s", c.ID, c.HostID, d.history(j))
		}
	}
	for name := range d.Handled {
		if !names[name] {
			s.violate("assimilated exactly once", "handler got %s, not a job in the database", name)
		}
	}
}

// checkBatches: the idempotent main batch is done with the correct outputs
// (in the results directory and in the API's tar.gz); the batch cancelled
// mid-run has each job either done before the cancel or cancelled, unsent
// instances not needed, assimilated as cancelled.
func (r *polRun) checkBatches(d *polData, s *polSummary) {
	byBatch := map[int64][]lcJob{}
	for _, j := range d.Jobs {
		byBatch[d.Job[j.ID].Batch] = append(byBatch[d.Job[j.ID].Batch], j)
	}
	mainN := 0
	for _, b := range d.Batches {
		if b.Name == polMainBatch {
			mainN++
		}
	}
	main := d.Batches[r.mainID]
	if mainN != 1 || main.State != 2 || main.CompletionTime == 0 || main.NJobs != polMainJobs || len(byBatch[r.mainID]) != polMainJobs {
		s.violate("main batch", "%d batches named %s; batch %d: state %d, completion_time %d, njobs %d, %d jobs; want one, done, with %d jobs",
			mainN, polMainBatch, r.mainID, main.State, main.CompletionTime, main.NJobs, len(byBatch[r.mainID]), polMainJobs)
	}
	want := map[string][]byte{}
	for _, j := range byBatch[r.mainID] {
		out := demoapp.Output(j.Name)
		want[polMainBatch+"/"+j.Name+"/out"] = out
		if j.CanonicalID == 0 || j.ErrorMask != 0 {
			s.violate("main batch", "job did not succeed: %s", d.history(j))
			continue
		}
		s.MainDone++
		if got, ok := d.Outputs[j.Name]; !ok || !bytes.Equal(got, out) {
			s.violate("correct output", "%s: handler's output %q (present %t) is not the correct one: %s", j.Name, firstLine(got), ok, d.history(j))
		}
	}
	for name, b := range r.mainOutputs {
		if w, ok := want[name]; !ok {
			s.violate("outputs over the API", "tar.gz has %s, not a job of the batch", name)
		} else if !bytes.Equal(b, w) {
			s.violate("outputs over the API", "tar.gz entry %s is %q, want the correct output %q", name, firstLine(b), firstLine(w))
		}
	}
	for name := range want {
		if _, ok := r.mainOutputs[name]; !ok {
			s.violate("outputs over the API", "tar.gz lacks %s", name)
		}
	}

	cb := d.Batches[r.cancelID]
	if cb.State != 3 || cb.CancelTime == 0 || r.cancelled.Batch.State != "cancelled" {
		s.violate("cancelled batch", "batch %d: state %d, cancel_time %d, the API answered state %q; want cancelled", r.cancelID, cb.State, cb.CancelTime, r.cancelled.Batch.State)
	}
	for _, j := range byBatch[r.cancelID] {
		switch {
		case j.CanonicalID != 0 && j.ErrorMask == 0:
			s.CancelDone++
		case j.CanonicalID == 0 && j.ErrorMask&state.ErrCancelled != 0:
			s.Cancelled++
			if _, ok := d.Outputs[j.Name]; ok {
				s.violate("cancelled batch", "cancelled job %s has an output file", j.Name)
			}
			for _, res := range d.Results[j.ID] {
				if res.Sent == 0 && (res.ServerState != state.ServerOver || res.Outcome != state.OutcomeDidntNeed) {
					s.violate("cancelled batch", "unsent instance %d of cancelled job is %s/%s, want OVER/DIDNT_NEED: %s", res.ID, res.ServerState, res.Outcome, d.history(j))
				}
				if res.Granted != 0 || res.ValidateState == state.ValidateValid {
					s.violate("cancelled batch", "instance %d of cancelled job is %s with credit %g: %s", res.ID, res.ValidateState, res.Granted, d.history(j))
				}
			}
		default:
			s.violate("cancelled batch", "job neither done before the cancel nor cancelled: %s", d.history(j))
		}
	}
	if s.Cancelled == 0 || s.CancelDone == 0 || int64(s.Cancelled) != r.cancelled.CancelledJobs {
		s.violate("cancelled batch", "%d jobs done and %d cancelled, the API said it stopped %d; want some of each, the cancelled ones those the API stopped",
			s.CancelDone, s.Cancelled, r.cancelled.CancelledJobs)
	}
}

// checkAdaptive: jobs sent to trusted hosts ran once, the others were
// replicated to their quorum and agreed.
func (r *polRun) checkAdaptive(d *polData, s *polSummary) {
	for _, j := range d.Jobs {
		pj := d.Job[j.ID]
		if pj.KnownAnswerID != 0 || (pj.Batch != r.mainID && pj.Batch != r.cancelID) {
			continue
		}
		if pj.ReplicationQuorum != 2 || (j.MinQuorum != 1 && j.MinQuorum != 2) {
			s.violate("adaptive replication", "replication_quorum %d, min_quorum %d; want 2 and 1 or 2: %s", pj.ReplicationQuorum, j.MinQuorum, d.history(j))
			continue
		}
		c, ok := d.ByID[j.CanonicalID]
		if !ok || j.ErrorMask != 0 {
			continue
		}
		valid := 0
		for _, res := range d.Results[j.ID] {
			if res.ValidateState == state.ValidateValid {
				valid++
			}
		}
		if j.MinQuorum == 2 {
			s.Replicated++
			if valid < 2 {
				s.violate("adaptive replication", "replicated job has %d valid results, want a quorum of 2: %s", valid, d.history(j))
			}
			continue
		}
		s.Single++
		// The host was trusted when the job was sent: at least
		// --ar-trust-valid of its results had been reported by then and
		// were (eventually) judged valid; a necessary condition.
		before := 0
		for _, res := range d.ByID {
			if res.HostID == c.HostID && res.ValidateState == state.ValidateValid && res.Received > 0 && res.Received <= c.Sent {
				before++
			}
		}
		if k := d.Hosts[c.HostID].Kind; k != "normal" || before < polTrustValid {
			s.violate("adaptive replication", "single-instance job's result %d comes from a %s host with %d valid results reported before it was sent; want an honest host with at least %d: %s",
				c.ID, k, before, polTrustValid, d.history(j))
		}
	}
	if s.Single == 0 || s.Replicated == 0 {
		s.violate("adaptive replication", "%d jobs ran once and %d were replicated; want some of each", s.Single, s.Replicated)
	}
}

// checkKnownAnswers: known-answer jobs were mixed in, validated against the
// stored answer (never handed over: see checkEveryJob), and a cheater's
// answer was invalid.
func (r *polRun) checkKnownAnswers(d *polData, s *polSummary) {
	for _, j := range d.Jobs {
		pj := d.Job[j.ID]
		if pj.KnownAnswerID == 0 {
			continue
		}
		s.KnownAnswer++
		c, ok := d.ByID[j.CanonicalID]
		if strings.HasPrefix(j.Name, "ka_") {
			s.violate("known answers", "known-answer job %s is named so a host can tell it apart: %s", j.Name, d.history(j))
		}
		if pj.Batch != 0 || !ok || j.ErrorMask != 0 ||
			c.ValidateState != state.ValidateValid || d.Hosts[c.HostID].Kind != "normal" {
			s.violate("known answers", "known-answer job (batch %d) not validated from an honest host: %s", pj.Batch, d.history(j))
		}
		for _, res := range d.Results[j.ID] {
			if res.Outcome != state.OutcomeSuccess {
				continue
			}
			switch d.Hosts[res.HostID].Kind {
			case "cheating":
				s.CheaterKnownAnswer++
				if res.ValidateState == state.ValidateInvalid {
					s.CheaterKnownAnswerInvalid++
				} else {
					s.violate("known answers", "cheater's result %d is %s: %s", res.ID, res.ValidateState, d.history(j))
				}
			case "normal":
				if res.ValidateState != state.ValidateValid {
					s.violate("known answers", "honest result %d is %s: %s", res.ID, res.ValidateState, d.history(j))
				}
			}
		}
	}
	if s.KnownAnswer == 0 || s.CheaterKnownAnswer == 0 {
		s.violate("known answers", "%d known-answer jobs, %d of their results from cheaters; want both > 0 (fraction %g of %d jobs)",
			s.KnownAnswer, s.CheaterKnownAnswer, polKAFraction, polMainJobs+polCancelJobs+polHoldJobs)
	}
	for id, h := range d.Hosts {
		if h.Kind == "cheating" && d.Host[id].ConsecutiveValid != 0 {
			s.violate("known answers", "cheating host %d has consecutive_valid %d", id, d.Host[id].ConsecutiveValid)
		}
	}
}

// checkHolds: the hold jobs were held twice (seen during the run), then
// cancelled and assimilated as such.
func (r *polRun) checkHolds(d *polData, s *polSummary) {
	held := map[string]bool{}
	for _, name := range r.holdJobs {
		held[name] = true
		if r.holdSeen[name] != 2 {
			s.violate("holds", "%s was seen held %d times, want 2", name, r.holdSeen[name])
		}
	}
	n := 0
	for _, j := range d.Jobs {
		if !held[j.Name] {
			continue
		}
		n++
		errs := 0
		for _, res := range d.Results[j.ID] {
			switch res.Outcome {
			case state.OutcomeClientError:
				errs++
			case state.OutcomeDidntNeed:
			default:
				s.violate("holds", "instance %d of a job that fails everywhere is %s: %s", res.ID, res.Outcome, d.history(j))
			}
		}
		// The cancel lifts the hold; the transitioner then applies the
		// limits again, which adds the hold's reason to the cancelled
		// bit, as BOINC's transitioner adds limit bits to a cancelled job.
		if j.ErrorMask&state.ErrCancelled == 0 || j.ErrorMask&^(state.ErrCancelled|state.ErrTooManyErrorResults) != 0 ||
			j.HoldReason != 0 || j.MaxError != 2 || errs != 3 {
			s.violate("holds", "error_mask %s, hold_reason %s, max_error_results %d, %d client errors; want cancelled (and the hold's reason), released, the limit doubled once, 3 errors: %s",
				j.ErrorMask, j.HoldReason, j.MaxError, errs, d.history(j))
		}
	}
	if n != len(r.holdJobs) {
		s.violate("holds", "%d hold jobs in the database, want %d", n, len(r.holdJobs))
	}
	if b := d.Batches[r.holdID]; b.State != 2 || b.CompletionTime == 0 {
		s.violate("holds", "batch %s (every job cancelled and assimilated): state %d, completion_time %d; want done", polHoldBatch, b.State, b.CompletionTime)
	}
}

// checkQuarantine: every failing host reached the error streak, and once
// it had, the scheduler never sent it a task while it held another.
func (r *polRun) checkQuarantine(d *polData, s *polSummary) {
	byHost := map[int64][]lcResult{}
	for _, id := range sortedKeys(d.ByID) {
		res := d.ByID[id]
		byHost[res.HostID] = append(byHost[res.HostID], res)
	}
	for _, id := range sortedKeys(d.Hosts) {
		if d.Hosts[id].Kind != "failing" {
			continue
		}
		rs := byHost[id]
		var errs []lcResult
		for _, res := range rs {
			if res.Outcome == state.OutcomeClientError && res.Received > 0 {
				errs = append(errs, res)
			}
		}
		sort.Slice(errs, func(a, b int) bool {
			if errs[a].Received != errs[b].Received {
				return errs[a].Received < errs[b].Received
			}
			return errs[a].ID < errs[b].ID
		})
		if d.Host[id].ErrorStreak < polQuarantine || len(errs) < polQuarantine {
			s.violate("quarantine", "failing host %d: error_streak %d after %d reported errors; want at least %d", id, d.Host[id].ErrorStreak, len(errs), polQuarantine)
			continue
		}
		s.QuarantinedHosts++
		// From the request that reported the streak's last error on,
		// each send must find nothing else in progress. Two requests of
		// one host are at least request_delay (1s) apart, so an equal
		// sent_time means the same request.
		since := errs[polQuarantine-1].Received
		for _, b := range rs {
			if b.Sent == 0 || b.Sent < since {
				continue
			}
			s.QuarantinedSends++
			for _, a := range rs {
				if a.ID == b.ID || a.Sent == 0 || a.Sent > b.Sent {
					continue
				}
				if a.Sent == b.Sent || a.Received > b.Sent {
					s.violate("quarantine", "host %d quarantined since %d: result %s sent at %d while %s (sent %d, reported %d) was in progress",
						id, since, b.Name, b.Sent, a.Name, a.Sent, a.Received)
				}
			}
		}
	}
	if s.QuarantinedHosts == 0 || s.QuarantinedSends == 0 {
		s.violate("quarantine", "%d failing hosts quarantined, %d sends to them afterwards; want both > 0", s.QuarantinedHosts, s.QuarantinedSends)
	}
}

// relEq compares credits computed in different orders, relatively: the
// median policy's credits are small.
func relEq(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// checkPolicyCredit: credit only to valid results, the job's canonical
// credit, a median of what the valid results claimed; equal sums in
// results, users and hosts; recent averages for whoever earned.
func (r *polRun) checkPolicyCredit(d *polData, s *polSummary) {
	byUser, byHost := map[int64]float64{}, map[int64]float64{}
	jobsByID := map[int64]lcJob{}
	for _, j := range d.Jobs {
		jobsByID[j.ID] = j
	}
	for _, id := range sortedKeys(d.ByID) {
		res := d.ByID[id]
		j := jobsByID[res.JobID]
		s.Credit += res.Granted
		byUser[res.UserID] += res.Granted
		byHost[res.HostID] += res.Granted
		switch res.ValidateState {
		case state.ValidateValid:
			s.Valid++
			if !(res.Granted > 0) || !relEq(res.Granted, j.CanonicalCredit) {
				s.violate("credit", "valid result %d got %g, the job's canonical_credit is %g: %s", res.ID, res.Granted, j.CanonicalCredit, d.history(j))
			}
		case state.ValidateInvalid:
			s.Invalid++
			fallthrough
		default:
			if res.Granted != 0 {
				s.violate("credit", "result %d is %s with credit %g: %s", res.ID, res.ValidateState, res.Granted, d.history(j))
			}
		}
	}
	// The median of the quorum's claims lies between the least and the
	// greatest claim of the job's valid results.
	for _, j := range d.Jobs {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, res := range d.Results[j.ID] {
			if res.ValidateState == state.ValidateValid {
				lo, hi = math.Min(lo, res.Claimed), math.Max(hi, res.Claimed)
			}
		}
		if math.IsInf(lo, 1) {
			continue
		}
		c := j.CanonicalCredit
		if hi > 0 && (c < lo*(1-1e-9) || c > hi*(1+1e-9)) {
			s.violate("credit", "canonical_credit %g is outside the valid results' claims [%g, %g]: %s", c, lo, hi, d.history(j))
		}
	}
	var users, hosts float64
	for _, id := range sortedKeys(d.Users) {
		users += d.Users[id]
		if !relEq(d.Users[id], byUser[id]) && math.Abs(d.Users[id]-byUser[id]) > 1e-15 {
			s.violate("credit adds up", "user %d total_credit %g, its results were granted %g", id, d.Users[id], byUser[id])
		}
		if d.Users[id] > 0 && !(d.UserExpavg[id] > 0) {
			s.violate("credit", "user %d has total_credit %g but expavg_credit %g", id, d.Users[id], d.UserExpavg[id])
		}
	}
	for _, id := range sortedKeys(d.Hosts) {
		h := d.Hosts[id]
		hosts += h.TotalCredit
		if !relEq(h.TotalCredit, byHost[id]) && math.Abs(h.TotalCredit-byHost[id]) > 1e-15 {
			s.violate("credit adds up", "host %d total_credit %g, its results were granted %g", id, h.TotalCredit, byHost[id])
		}
		if h.TotalCredit > 0 && !(d.Host[id].Expavg > 0) {
			s.violate("credit", "host %d has total_credit %g but expavg_credit %g", id, h.TotalCredit, d.Host[id].Expavg)
		}
	}
	if !(s.Credit > 0) || !relEq(users, s.Credit) || !relEq(hosts, s.Credit) {
		s.violate("credit adds up", "granted %g in results, %g in user totals, %g in host totals", s.Credit, users, hosts)
	}
}
