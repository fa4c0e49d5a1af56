package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/state"
)

// lcHost is a host row with its simulated kind (from its domain name).
type lcHost struct {
	ID, UserID  int64
	Kind        string
	TotalCredit float64
}

// lcAck is one line of simclient's ack log.
type lcAck struct {
	Name, Kind string
	Success    bool
	Late       bool
}

// lcData is everything the checks read once the project is stopped.
type lcData struct {
	Policy  string
	Jobs    []lcJob
	Results map[int64][]lcResult // by job id, in id order
	ByID    map[int64]lcResult
	Hosts   map[int64]lcHost
	Users   map[int64]float64 // total_credit by user id
	Acks    []lcAck
	Handled map[string][]string // job name -> the error masks it was handled with
	Outputs map[string][]byte   // job name -> the output the handler copied
}

func (lp *lcProject) collect(ctx context.Context) (*lcData, error) {
	d := &lcData{Results: map[int64][]lcResult{}, ByID: map[int64]lcResult{}, Hosts: map[int64]lcHost{},
		Users: map[int64]float64{}, Handled: map[string][]string{}, Outputs: map[string][]byte{}}
	db := lp.db
	if err := db.QueryRowContext(ctx, `SELECT credit_policy FROM app WHERE name = ?`, demoapp.AppName).Scan(&d.Policy); err != nil {
		return nil, fmt.Errorf("read app policy: %w", err)
	}
	err := query(ctx, db, `SELECT id, name, error_mask, hold_reason, assimilate_state, canonical_resultid, canonical_credit,
		need_validate, min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, rsc_fpops_est,
		fixed_credit FROM workunit ORDER BY id`, func(rows *sql.Rows) error {
		var j lcJob
		err := rows.Scan(&j.ID, &j.Name, &j.ErrorMask, &j.HoldReason, &j.AssimilateState, &j.CanonicalID, &j.CanonicalCredit,
			&j.NeedValidate, &j.MinQuorum, &j.Target, &j.MaxError, &j.MaxTotal, &j.MaxSuccess, &j.FpopsEst, &j.FixedCredit)
		d.Jobs = append(d.Jobs, j)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	err = query(ctx, db, `SELECT id, workunitid, hostid, userid, name, server_state, outcome, validate_state, client_state,
		exit_status, create_time, sent_time, received_time, report_deadline, granted_credit, claimed_credit FROM result ORDER BY id`,
		func(rows *sql.Rows) error {
			var r lcResult
			err := rows.Scan(&r.ID, &r.JobID, &r.HostID, &r.UserID, &r.Name, &r.ServerState, &r.Outcome, &r.ValidateState,
				&r.ClientState, &r.ExitStatus, &r.Created, &r.Sent, &r.Received, &r.Deadline, &r.Granted, &r.Claimed)
			d.Results[r.JobID] = append(d.Results[r.JobID], r)
			d.ByID[r.ID] = r
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	err = query(ctx, db, `SELECT id, userid, domain_name, total_credit FROM host`, func(rows *sql.Rows) error {
		var h lcHost
		var domain string
		err := rows.Scan(&h.ID, &h.UserID, &domain, &h.TotalCredit)
		if i := strings.LastIndexByte(domain, '.'); i >= 0 {
			h.Kind = domain[i+1:]
		}
		d.Hosts[h.ID] = h
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read hosts: %w", err)
	}
	err = query(ctx, db, `SELECT id, total_credit FROM user`, func(rows *sql.Rows) error {
		var id int64
		var c float64
		err := rows.Scan(&id, &c)
		d.Users[id] = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	if err := readLines(lp.ackLog, func(line string) error {
		f := strings.Fields(line)
		if len(f) != 4 {
			return fmt.Errorf("ack log line %q: want 4 fields", line)
		}
		d.Acks = append(d.Acks, lcAck{Name: f[0], Kind: f[1], Success: f[2] == "success", Late: f[3] == "late"})
		return nil
	}); err != nil {
		return nil, err
	}
	if err := readLines(lp.handled, func(line string) error {
		name, mask, _ := strings.Cut(line, " ")
		d.Handled[name] = append(d.Handled[name], mask)
		return nil
	}); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(lp.outDir)
	if err != nil {
		return nil, fmt.Errorf("read handler outputs: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(lp.outDir, e.Name(), "out"))
		if err != nil {
			return nil, fmt.Errorf("read handler output: %w", err)
		}
		d.Outputs[e.Name()] = b
	}
	return d, nil
}

func query(ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// readLines calls f on every non-empty line of path; a missing file has no
// lines.
func readLines(path string, f func(string) error) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			if err := f(line); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// lcSummary counts what flowed through and collects what broke, by
// invariant.
type lcSummary struct {
	Jobs, Success, Errored                int
	Instances, Valid, Invalid, TooLate    int
	Late, LateAcked, Acked, CheaterOutput int
	Credit                                float64
	Masks                                 map[string]int // errored jobs by error mask
	broken                                map[string][]string
}

func (s *lcSummary) violate(invariant, format string, args ...any) {
	if s.broken == nil {
		s.broken = map[string][]string{}
	}
	s.broken[invariant] = append(s.broken[invariant], fmt.Sprintf(format, args...))
}

// String is the one summary line.
func (s *lcSummary) String() string {
	return fmt.Sprintf("jobs=%d success=%d errored=%d %v instances=%d valid=%d invalid=%d too_late=%d late=%d (acked late %d) acked=%d cheater_outputs=%d credit=%.6f",
		s.Jobs, s.Success, s.Errored, s.Masks, s.Instances, s.Valid, s.Invalid, s.TooLate, s.Late, s.LateAcked, s.Acked, s.CheaterOutput, s.Credit)
}

// Broken lists each broken invariant with up to perInvariant examples.
func (s *lcSummary) Broken(perInvariant int) []string {
	var keys []string
	for k := range s.broken {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		v := s.broken[k]
		msg := fmt.Sprintf("%s: %d violation(s)", k, len(v))
		for i, e := range v {
			if i == perInvariant {
				msg += fmt.Sprintf("\n    ... %d more", len(v)-i)
				break
			}
			msg += "\n    " + e
		}
		out = append(out, msg)
	}
	return out
}

// history is a job and its instances, for failure messages.
func (d *lcData) history(j lcJob) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %d %s: error_mask=%s canonical=%d assimilate=%s target=%d limits(err %d, total %d, success %d)",
		j.ID, j.Name, j.ErrorMask, j.CanonicalID, j.AssimilateState, j.Target, j.MaxError, j.MaxTotal, j.MaxSuccess)
	for _, r := range d.Results[j.ID] {
		fmt.Fprintf(&b, "\n      result %d %s host %d (%s) user %d: %s/%s/%s sent %d received %d deadline %d granted %g",
			r.ID, r.Name, r.HostID, d.Hosts[r.HostID].Kind, r.UserID, r.ServerState, r.Outcome, r.ValidateState,
			r.Sent, r.Received, r.Deadline, r.Granted)
	}
	return b.String()
}

// fpopsCredit is the credit of a job by its FLOP estimate: 200 per day of
// a 1 GFLOPS computer (the cobblestone).
func fpopsCredit(fpopsEst float64) float64 { return fpopsEst * 200 / 86400e9 }

// sameFloat compares credits computed in different orders.
func sameFloat(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// check verifies every invariant of the lifecycle on the final state.
func (d *lcData) check(wantJobs int) *lcSummary {
	s := &lcSummary{Jobs: len(d.Jobs), Masks: map[string]int{}}
	if len(d.Jobs) != wantJobs {
		s.violate("jobs created", "%d jobs in the database, want %d", len(d.Jobs), wantJobs)
	}
	names := map[string]bool{}
	for _, j := range d.Jobs {
		names[j.Name] = true
		d.checkJob(s, j)
	}
	for name, masks := range d.Handled {
		if !names[name] {
			s.violate("assimilated exactly once", "handler got %s (masks %v), not a job in the database", name, masks)
		}
	}
	d.checkCredit(s)
	d.checkAcks(s)
	return s
}

func (d *lcData) checkJob(s *lcSummary, j lcJob) {
	rs := d.Results[j.ID]
	s.Instances += len(rs)
	users := map[int64]int{}
	for _, r := range rs {
		if r.UserID != 0 {
			users[r.UserID]++
		}
		switch r.ValidateState {
		case state.ValidateValid:
			s.Valid++
		case state.ValidateInvalid:
			s.Invalid++
		case state.ValidateTooLate:
			s.TooLate++
		}
		if r.late() {
			s.Late++
		}
		if r.ServerState != state.ServerOver {
			s.violate("every instance over", "result %d %s is %s at the end; %s", r.ID, r.Name, r.ServerState, d.history(j))
		}
		kind := d.Hosts[r.HostID].Kind
		if r.ValidateState == state.ValidateValid && kind == "cheating" {
			s.violate("no cheater valid", "result %d of cheating host %d is valid: %s", r.ID, r.HostID, d.history(j))
		}
		if kind == "cheating" && r.Outcome == state.OutcomeSuccess {
			s.CheaterOutput++
		}
	}
	for u, n := range users {
		if n > 1 {
			s.violate("no user twice", "user %d got %d instances of %s", u, n, d.history(j))
		}
	}
	if masks := d.Handled[j.Name]; len(masks) != 1 {
		s.violate("assimilated exactly once", "handler ran %d times for %s (masks %v); %s", len(masks), j.Name, masks, d.history(j))
	} else if masks[0] != fmt.Sprint(int(j.ErrorMask)) {
		s.violate("assimilated exactly once", "handler got error mask %s for %s, the database says %d", masks[0], j.Name, j.ErrorMask)
	}
	if j.AssimilateState != state.AssimilateDone || j.NeedValidate || j.HoldReason != 0 {
		s.violate("every job finished", "assimilate_state %s, need_validate %v, hold_reason %s: %s",
			j.AssimilateState, j.NeedValidate, j.HoldReason, d.history(j))
	}
	out, hasOut := d.Outputs[j.Name]
	switch {
	case j.CanonicalID != 0 && j.ErrorMask == 0:
		s.Success++
		if !hasOut {
			s.violate("correct output", "%s succeeded but the handler got no output", j.Name)
		} else if !bytes.Equal(out, demoapp.Output(j.Name)) {
			s.violate("correct output", "%s: assimilated output %q is not the correct one; %s", j.Name, firstLine(out), d.history(j))
		}
		c, ok := d.ByID[j.CanonicalID]
		switch {
		case !ok || c.JobID != j.ID:
			s.violate("canonical result", "canonical result %d is not an instance of %s", j.CanonicalID, d.history(j))
		case c.Outcome != state.OutcomeSuccess || c.ValidateState != state.ValidateValid:
			s.violate("canonical result", "canonical result %d is %s/%s: %s", c.ID, c.Outcome, c.ValidateState, d.history(j))
		case d.Hosts[c.HostID].Kind == "cheating":
			s.violate("no cheater canonical", "canonical result %d comes from cheating host %d: %s", c.ID, c.HostID, d.history(j))
		}
	case j.CanonicalID == 0 && j.ErrorMask != 0:
		s.Errored++
		s.Masks[j.ErrorMask.String()]++
		if hasOut {
			s.violate("errored job has no output", "%s failed (%s) but the handler got an output", j.Name, j.ErrorMask)
		}
		for _, r := range rs {
			if r.ValidateState == state.ValidateValid {
				s.violate("errored job has no valid result", "result %d is valid: %s", r.ID, d.history(j))
			}
		}
		if err := explainErrorMask(j, rs); err != nil {
			s.violate("error mask follows the history", "%v: %s", err, d.history(j))
		}
	default:
		s.violate("success xor error", "canonical %d with error_mask %s: %s", j.CanonicalID, j.ErrorMask, d.history(j))
	}
}

// checkCredit: credit only to valid results, each the job's credit by the
// app's policy, and the same total in results, users and hosts.
func (d *lcData) checkCredit(s *lcSummary) {
	jobs := map[int64]lcJob{}
	for _, j := range d.Jobs {
		jobs[j.ID] = j
	}
	byUser, byHost := map[int64]float64{}, map[int64]float64{}
	var ids []int64
	for id := range d.ByID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		r := d.ByID[id]
		j := jobs[r.JobID]
		s.Credit += r.Granted
		byUser[r.UserID] += r.Granted
		byHost[r.HostID] += r.Granted
		if r.ValidateState != state.ValidateValid {
			if r.Granted != 0 {
				s.violate("credit only to valid results", "result %d is %s with %g credit: %s", r.ID, r.ValidateState, r.Granted, d.history(j))
			}
			continue
		}
		want, exact := d.jobCredit(j)
		switch {
		case !(r.Granted > 0):
			s.violate("credit per policy", "valid result %d got %g credit: %s", r.ID, r.Granted, d.history(j))
		case !sameFloat(r.Granted, j.CanonicalCredit):
			s.violate("credit per policy", "valid result %d got %g, the job's canonical_credit is %g: %s", r.ID, r.Granted, j.CanonicalCredit, d.history(j))
		case exact && !sameFloat(r.Granted, want):
			s.violate("credit per policy", "valid result %d got %g, policy %q gives %g: %s", r.ID, r.Granted, d.Policy, want, d.history(j))
		}
	}
	var users, hosts float64
	for _, id := range sortedKeys(d.Users) {
		users += d.Users[id]
		if !sameFloat(d.Users[id], byUser[id]) {
			s.violate("credit adds up", "user %d total_credit %g, its results were granted %g", id, d.Users[id], byUser[id])
		}
	}
	for _, id := range sortedKeys(d.Hosts) {
		h := d.Hosts[id]
		hosts += h.TotalCredit
		if !sameFloat(h.TotalCredit, byHost[id]) {
			s.violate("credit adds up", "host %d total_credit %g, its results were granted %g", id, h.TotalCredit, byHost[id])
		}
	}
	if !sameFloat(users, s.Credit) || !sameFloat(hosts, s.Credit) {
		s.violate("credit adds up", "granted %g in results, %g in user totals, %g in host totals", s.Credit, users, hosts)
	}
}

// jobCredit is what a valid result of j earns under the app's policy; exact
// is false for the median policy, whose value depends on which results
// formed the quorum: then only canonical_credit is compared.
func (d *lcData) jobCredit(j lcJob) (credit float64, exact bool) {
	switch d.Policy {
	case "", "fpops":
		return fpopsCredit(j.FpopsEst), true
	case "fixed":
		if j.FixedCredit > 0 {
			return j.FixedCredit, true
		}
		return fpopsCredit(j.FpopsEst), true
	}
	return 0, false
}

// checkAcks: every result the hosts reported and the server acknowledged is
// over, with the outcome the host reported.
func (d *lcData) checkAcks(s *lcSummary) {
	byName := map[string]lcResult{}
	for _, r := range d.ByID {
		byName[r.Name] = r
	}
	jobs := map[int64]lcJob{}
	for _, j := range d.Jobs {
		jobs[j.ID] = j
	}
	seen := map[string]bool{}
	for _, a := range d.Acks {
		s.Acked++
		if a.Late {
			s.LateAcked++
		}
		if seen[a.Name] {
			s.violate("no reported result lost", "result %s acknowledged twice", a.Name)
		}
		seen[a.Name] = true
		r, ok := byName[a.Name]
		if !ok {
			s.violate("no reported result lost", "acknowledged result %s is not in the database", a.Name)
			continue
		}
		want := state.OutcomeClientError
		if a.Success {
			want = state.OutcomeSuccess
		}
		if r.ServerState != state.ServerOver || r.Outcome != want || r.Received == 0 {
			late := ""
			if a.Late {
				late = " late"
			}
			s.violate("no reported result lost", "%s reported%s as %s by a %s host, recorded as %s/%s received %d: %s",
				a.Name, late, want, a.Kind, r.ServerState, r.Outcome, r.Received, d.history(jobs[r.JobID]))
		}
		if k := d.Hosts[r.HostID].Kind; k != a.Kind {
			s.violate("host kinds", "%s reported by a %s host, the database's host %d is %q", a.Name, a.Kind, r.HostID, k)
		}
	}
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(a, b int) bool { return ks[a] < ks[b] })
	return ks
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
