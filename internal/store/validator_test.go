package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const (
	vt0  = 1_700_000_000
	week = store.ExpavgHalfLife
	day  = 86400
)

func TestExpavgCredit(t *testing.T) {
	t.Parallel()
	// steady grants c/n credits n times a day for many weeks.
	steady := func(c float64, n int) float64 {
		avg, at := 0.0, 0.0
		for i := range 100 * 7 * n {
			now := int64(vt0 + i*day/n)
			avg, at = store.ExpavgCredit(avg, at, c/float64(n), now), float64(now)
		}
		return avg
	}
	tests := []struct {
		name      string
		got, want float64
		tolerance float64
	}{
		{"a week without credit halves the average", store.ExpavgCredit(100, vt0, 0, vt0+week), 50, 1e-9},
		{"two weeks quarter it", store.ExpavgCredit(100, vt0, 0, vt0+2*week), 25, 1e-9},
		{"no time passed: nothing decays", store.ExpavgCredit(100, vt0, 0, vt0), 100, 0},
		{"credit joins as credit per day × ln2 / 7", store.ExpavgCredit(0, vt0, 700, vt0), 700 * math.Ln2 / 7, 1e-9},
		{"never averaged before (time 0): the old value is gone", store.ExpavgCredit(1e6, 0, 0, vt0), 0, 1e-9},
		{"a clock behind expavg_time does not inflate it", store.ExpavgCredit(100, vt0, 0, vt0-day), 100, 0},
		{"a steady 100 a day, granted hourly, converges to 100", steady(100, 24), 100, 0.01},
		{"a steady 100 a day, granted daily, hovers near 100", steady(100, 1), 100, 0.06},
	}
	for _, tt := range tests {
		if math.Abs(tt.got-tt.want) > tt.tolerance*math.Max(1, math.Abs(tt.want)) {
			t.Errorf("%s: got %g, want %g (±%g)", tt.name, tt.got, tt.want, tt.tolerance)
		}
	}
}

// validateFixture is a job with instances of distinct volunteers.
type validateFixture struct {
	st      *store.Store
	wuID    int64
	results []row.Result
}

func newValidateFixture(t *testing.T, st *store.Store, name string, n int, userID, hostID []int64) validateFixture {
	t.Helper()
	f := validateFixture{st: st}
	f.wuID = storetest.Job(t, st, storetest.JobOptions{CreateTime: vt0, App: 1, Name: name, MinQuorum: 2,
		TargetNResults: 2, MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, NeedValidate: true,
		TransitionTime: state.NoTransition}).ID
	for i := range n {
		r := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: vt0, Job: f.wuID, Name: fmt.Sprintf("%s_%d", name, i),
			ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, User: userID[i], Host: hostID[i]})
		f.results = append(f.results, r)
	}
	return f
}

func volunteers(t *testing.T, st *store.Store, prefix string, n int) (users, hosts []int64) {
	t.Helper()
	for i := range n {
		email := fmt.Sprintf("%s%d@example.com", prefix, i)
		u := storetest.User(t, st, storetest.UserOptions{CreateTime: vt0, EmailAddr: email, Name: email, Authenticator: "a" + email}).ID
		h := storetest.Host(t, st, storetest.HostOptions{CreateTime: vt0, User: u}).ID
		users, hosts = append(users, u), append(hosts, h)
	}
	return users, hosts
}

func TestWorkunitValidateCreditOnceStreaksAndExpavg(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "v", 3)
	// Volunteer 0 earned 100 a day ago; volunteer 2 had a good run.
	if _, err := st.DB().Exec(`UPDATE user SET expavg_credit = 100, expavg_time = ? WHERE id = ?`, vt0-day, users[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`UPDATE host SET expavg_credit = 100, expavg_time = ?, error_streak = 2 WHERE id = ?`, vt0-day, hosts[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`UPDATE host SET consecutive_valid = 5 WHERE id = ?`, hosts[2]); err != nil {
		t.Fatal(err)
	}
	f := newValidateFixture(t, st, "job", 3, users, hosts)
	v := func(i int, vs state.ValidateState, o state.Outcome, credit float64) store.ResultValidation {
		return store.ResultValidation{ID: f.results[i].ID, UserID: users[i], HostID: hosts[i], ValidateState: vs,
			Outcome: o, GrantedCredit: credit}
	}
	p := store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID, CanonicalCredit: 50,
		Results: []store.ResultValidation{
			v(0, state.ValidateValid, state.OutcomeSuccess, 50),
			v(1, state.ValidateValid, state.OutcomeSuccess, 50),
			v(2, state.ValidateInvalid, state.OutcomeValidateError, 0),
		}}
	if err := st.WorkunitValidate(ctx, p); err != nil {
		t.Fatalf("WorkunitValidate: %v", err)
	}
	// A rerun, even with the job flagged again, writes nothing. It comes
	// later, as after a crash: with the same Now every statement would
	// change nothing and conflict whatever its WHERE says.
	p.Now = vt0 + 60
	if err := st.WorkunitValidate(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WorkunitValidate again = %v, want ErrConflict", err)
	}
	if _, err := st.DB().Exec(`UPDATE workunit SET need_validate = 1, canonical_resultid = 0 WHERE id = ?`, f.wuID); err != nil {
		t.Fatal(err)
	}
	if err := st.WorkunitValidate(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WorkunitValidate of judged instances = %v, want ErrConflict", err)
	}

	wantAvg0 := store.ExpavgCredit(100, vt0-day, 50, vt0)
	wantAvg1 := store.ExpavgCredit(0, 0, 50, vt0)
	for i, want := range []struct {
		total, avg, avgTime float64
		consecutiveValid    int
		errorStreak         int
	}{
		{50, wantAvg0, vt0, 1, 0},
		{50, wantAvg1, vt0, 1, 0},
		{0, 0, 0, 0, 1},
	} {
		u, err := st.UserGet(ctx, users[i])
		if err != nil {
			t.Fatal(err)
		}
		h, err := st.HostGet(ctx, hosts[i])
		if err != nil {
			t.Fatal(err)
		}
		if u.TotalCredit != want.total || math.Abs(u.ExpavgCredit-want.avg) > 1e-9 || u.ExpavgTime != want.avgTime {
			t.Errorf("user %d: total %g expavg %g at %g; want %g, %g at %g", i, u.TotalCredit, u.ExpavgCredit,
				u.ExpavgTime, want.total, want.avg, want.avgTime)
		}
		if h.TotalCredit != want.total || math.Abs(h.ExpavgCredit-want.avg) > 1e-9 || h.ExpavgTime != want.avgTime {
			t.Errorf("host %d: total %g expavg %g at %g; want %g, %g at %g", i, h.TotalCredit, h.ExpavgCredit,
				h.ExpavgTime, want.total, want.avg, want.avgTime)
		}
		if h.ConsecutiveValid != want.consecutiveValid || h.ErrorStreak != want.errorStreak {
			t.Errorf("host %d: consecutive_valid %d error_streak %d; want %d, %d", i, h.ConsecutiveValid,
				h.ErrorStreak, want.consecutiveValid, want.errorStreak)
		}
	}
}

func TestWorkunitValidateHostVerdictsInOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		verdicts         []state.ValidateState
		consecutiveValid int
		errorStreak      int
	}{
		{"valid then invalid", []state.ValidateState{state.ValidateValid, state.ValidateInvalid}, 0, 1},
		{"invalid then valid", []state.ValidateState{state.ValidateInvalid, state.ValidateValid}, 1, 0},
		{"two valid", []state.ValidateState{state.ValidateValid, state.ValidateValid}, 9, 0},
		{"inconclusive leaves the counts", []state.ValidateState{state.ValidateInconclusive, state.ValidateTooLate}, 7, 3},
	}
	st := storetest.New(t)
	ctx := context.Background()
	for i, tt := range tests {
		users, hosts := volunteers(t, st, fmt.Sprintf("v%d_", i), 1)
		if _, err := st.DB().Exec(`UPDATE host SET consecutive_valid = 7, error_streak = 3 WHERE id = ?`, hosts[0]); err != nil {
			t.Fatal(err)
		}
		// One host with two instances of one job.
		f := newValidateFixture(t, st, fmt.Sprintf("job%d", i), 2, []int64{users[0], users[0]}, []int64{hosts[0], hosts[0]})
		p := store.WorkunitValidateParams{ID: f.wuID, Now: vt0}
		for j, vs := range tt.verdicts {
			p.Results = append(p.Results, store.ResultValidation{ID: f.results[j].ID, UserID: users[0], HostID: hosts[0],
				ValidateState: vs, Outcome: state.OutcomeSuccess})
		}
		if err := st.WorkunitValidate(ctx, p); err != nil {
			t.Fatalf("%s: WorkunitValidate: %v", tt.name, err)
		}
		h, err := st.HostGet(ctx, hosts[0])
		if err != nil {
			t.Fatal(err)
		}
		if h.ConsecutiveValid != tt.consecutiveValid || h.ErrorStreak != tt.errorStreak {
			t.Errorf("%s (from 7, 3): consecutive_valid %d error_streak %d; want %d, %d", tt.name, h.ConsecutiveValid,
				h.ErrorStreak, tt.consecutiveValid, tt.errorStreak)
		}
	}
}

func TestWorkunitValidateConcurrentCreditIsNotLost(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "v", 2)
	const jobs = 8
	var fixtures []validateFixture
	for i := range jobs {
		fixtures = append(fixtures, newValidateFixture(t, st, fmt.Sprintf("job%d", i), 2, users, hosts))
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for _, f := range fixtures {
		wg.Go(func() {
			p := store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID, CanonicalCredit: 10}
			for j, r := range f.results {
				p.Results = append(p.Results, store.ResultValidation{ID: r.ID, UserID: users[j], HostID: hosts[j],
					ValidateState: state.ValidateValid, Outcome: state.OutcomeSuccess, GrantedCredit: 10})
			}
			errs <- st.WorkunitValidate(ctx, p)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent WorkunitValidate: %v", err)
		}
	}
	wantAvg := float64(jobs) * store.ExpavgCredit(0, vt0, 10, vt0)
	for i := range users {
		u, _ := st.UserGet(ctx, users[i])
		h, _ := st.HostGet(ctx, hosts[i])
		if u.TotalCredit != 10*jobs || h.TotalCredit != 10*jobs || math.Abs(u.ExpavgCredit-wantAvg) > 1e-9 ||
			h.ConsecutiveValid != jobs {
			t.Errorf("volunteer %d after %d concurrent validations: user total %g expavg %g, host total %g "+
				"consecutive_valid %d; want %d, %g, %d, %d", i, jobs, u.TotalCredit, u.ExpavgCredit, h.TotalCredit,
				h.ConsecutiveValid, 10*jobs, wantAvg, 10*jobs, jobs)
		}
	}
}

func TestKnownAnswerGet(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	res, err := st.DB().Exec(`INSERT INTO known_answer (create_time, appid, name, input, output) VALUES (?, 1, 'k', 'in', 'out')`, vt0)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	k, err := st.KnownAnswerGet(ctx, id)
	if err != nil || k.ID != id || k.Name != "k" || string(k.Output) != "out" || k.Input != nil {
		t.Errorf("KnownAnswerGet(%d) = %+v, %v; want k with output and no input", id, k, err)
	}
	if _, err := st.KnownAnswerGet(ctx, id+1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KnownAnswerGet(missing) = %v, want ErrNotFound", err)
	}
}

// A job cancelled while it awaits validation gets no verdict: the cancel and
// the verdict exclude each other, and no credit is granted for it.
func TestWorkunitValidateAfterCancelConflicts(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "c", 2)
	f := newValidateFixture(t, st, "cancelled", 2, users, hosts)
	if err := st.WorkunitCancel(ctx, f.wuID, vt0); err != nil {
		t.Fatalf("WorkunitCancel: %v", err)
	}
	p := store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID, CanonicalCredit: 50,
		Results: []store.ResultValidation{
			{ID: f.results[0].ID, UserID: users[0], HostID: hosts[0], ValidateState: state.ValidateValid,
				Outcome: state.OutcomeSuccess, GrantedCredit: 50},
			{ID: f.results[1].ID, UserID: users[1], HostID: hosts[1], ValidateState: state.ValidateValid,
				Outcome: state.OutcomeSuccess, GrantedCredit: 50},
		}}
	if err := st.WorkunitValidate(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitValidate of a cancelled job = %v, want ErrConflict", err)
	}
	p.CanonicalResultID, p.CanonicalCredit = 0, 0
	if err := st.WorkunitValidate(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitValidate (no canonical) of a cancelled job = %v, want ErrConflict", err)
	}
	wu, err := st.WorkunitGet(ctx, f.wuID)
	if err != nil {
		t.Fatal(err)
	}
	if wu.CanonicalResultID != 0 || wu.ErrorMask != state.ErrCancelled {
		t.Fatalf("cancelled job after a validation = canonical %d error_mask %v; want 0, cancelled", wu.CanonicalResultID, wu.ErrorMask)
	}
	for _, id := range users {
		if u, err := st.UserGet(ctx, id); err != nil || u.TotalCredit != 0 {
			t.Fatalf("user %d credit = %v, %v; want 0", id, u.TotalCredit, err)
		}
	}
}

// The job-by-job write (the validator's fallback when a pass's batch
// fails) conflicts, writing nothing and granting no credit, in each case
// the batch leaves a job out: the job validated by someone else, an
// instance judged meanwhile, a canonical instance already there, the job
// failed.
func TestWorkunitValidateConflictsGrantNothing(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	for i, tc := range []struct {
		what   string
		change func(f validateFixture)
	}{
		{"validated elsewhere", func(f validateFixture) {
			storetest.Exec(t, st, `UPDATE workunit SET need_validate = 0 WHERE id = ?`, f.wuID)
		}},
		{"instance judged meanwhile", func(f validateFixture) {
			storetest.Exec(t, st, `UPDATE result SET validate_state = ? WHERE id = ?`, state.ValidateValid, f.results[1].ID)
		}},
		{"canonical already", func(f validateFixture) {
			storetest.Exec(t, st, `UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, f.results[0].ID, f.wuID)
		}},
		{"failed", func(f validateFixture) {
			storetest.Exec(t, st, `UPDATE workunit SET error_mask = 16 WHERE id = ?`, f.wuID)
		}},
	} {
		users, hosts := volunteers(t, st, fmt.Sprintf("x%d_", i), 2)
		f := newValidateFixture(t, st, fmt.Sprintf("x%d", i), 2, users, hosts)
		tc.change(f)
		p := store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID, CanonicalCredit: 50}
		for j, r := range f.results {
			p.Results = append(p.Results, store.ResultValidation{ID: r.ID, UserID: users[j], HostID: hosts[j],
				ValidateState: state.ValidateValid, Outcome: state.OutcomeSuccess, GrantedCredit: 50})
		}
		if err := st.WorkunitValidate(ctx, p); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: WorkunitValidate = %v, want ErrConflict", tc.what, err)
		}
		for j := range users {
			u, err := st.UserGet(ctx, users[j])
			if err != nil {
				t.Fatal(err)
			}
			h, err := st.HostGet(ctx, hosts[j])
			if err != nil {
				t.Fatal(err)
			}
			if u.TotalCredit != 0 || h.TotalCredit != 0 || h.ConsecutiveValid != 0 {
				t.Errorf("%s: volunteer %d credit %g / %g, consecutive_valid %d; want none", tc.what, j, u.TotalCredit,
					h.TotalCredit, h.ConsecutiveValid)
			}
		}
	}
}
