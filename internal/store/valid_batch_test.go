package store_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestWorkunitValidateBatchSkipsConflictsAndWritesTheRest(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "b", 3)
	storetest.Exec(t, st, `UPDATE user SET expavg_credit = 100, expavg_time = ? WHERE id = ?`, vt0-day, users[0])
	storetest.Exec(t, st, `UPDATE host SET expavg_credit = 100, expavg_time = ?, error_streak = 2 WHERE id = ?`, vt0-day, hosts[0])
	storetest.Exec(t, st, `UPDATE host SET consecutive_valid = 5 WHERE id = ?`, hosts[2])

	// v(f, i, vol, ...) is instance i of f, reported by volunteer vol.
	v := func(f validateFixture, i, vol int, vs state.ValidateState, o state.Outcome, credit float64) store.ResultValidation {
		return store.ResultValidation{ID: f.results[i].ID, UserID: users[vol], HostID: hosts[vol], ValidateState: vs,
			Outcome: o, GrantedCredit: credit}
	}
	vols := func(ids ...int) ([]int64, []int64) {
		var u, h []int64
		for _, i := range ids {
			u, h = append(u, users[i]), append(h, hosts[i])
		}
		return u, h
	}
	ua, ha := vols(0, 1, 2)
	a := newValidateFixture(t, st, "a", 3, ua, ha)
	ub, hb := vols(0, 2)
	b := newValidateFixture(t, st, "b", 2, ub, hb)
	c := newValidateFixture(t, st, "c", 2, ub, hb)
	d := newValidateFixture(t, st, "d", 2, ub, hb)
	e := newValidateFixture(t, st, "e", 2, ub, hb)
	f := newValidateFixture(t, st, "f", 2, ub, hb)
	g := newValidateFixture(t, st, "g", 2, ub, hb)
	// c was validated by someone else, one of d's instances was judged
	// meanwhile, f has its canonical instance already, g was cancelled.
	storetest.Exec(t, st, `UPDATE workunit SET need_validate = 0 WHERE id = ?`, c.wuID)
	storetest.Exec(t, st, `UPDATE result SET validate_state = ? WHERE id = ?`, state.ValidateValid, d.results[1].ID)
	storetest.Exec(t, st, `UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, f.results[0].ID, f.wuID)
	storetest.Exec(t, st, `UPDATE workunit SET error_mask = 16 WHERE id = ?`, g.wuID)

	agree := func(x validateFixture, credit float64) store.WorkunitValidateParams {
		return store.WorkunitValidateParams{ID: x.wuID, CanonicalResultID: x.results[0].ID, CanonicalCredit: credit,
			Results: []store.ResultValidation{
				v(x, 0, 0, state.ValidateValid, state.OutcomeSuccess, credit),
				v(x, 1, 2, state.ValidateValid, state.OutcomeSuccess, credit),
			}}
	}
	p := store.WorkunitValidateBatchParams{Now: vt0, Jobs: []store.WorkunitValidateParams{
		{ID: a.wuID, CanonicalResultID: a.results[0].ID, CanonicalCredit: 50, Results: []store.ResultValidation{
			v(a, 0, 0, state.ValidateValid, state.OutcomeSuccess, 50),
			v(a, 1, 1, state.ValidateValid, state.OutcomeSuccess, 50),
			v(a, 2, 2, state.ValidateInvalid, state.OutcomeValidateError, 0),
		}},
		agree(b, 30), agree(c, 1000), agree(d, 1000),
		{ID: e.wuID, TargetNResults: 3, Results: []store.ResultValidation{
			v(e, 0, 0, state.ValidateInconclusive, state.OutcomeSuccess, 0),
			v(e, 1, 2, state.ValidateInconclusive, state.OutcomeSuccess, 0),
		}},
		agree(f, 1000), agree(g, 1000),
	}}
	conflicts, err := st.WorkunitValidateBatch(ctx, p)
	if err != nil {
		t.Fatalf("WorkunitValidateBatch: %v", err)
	}
	want := []int64{c.wuID, d.wuID, f.wuID, g.wuID}
	slices.Sort(conflicts)
	if !slices.Equal(conflicts, want) {
		t.Errorf("WorkunitValidateBatch conflicts = %v, want %v (c, d, f, g)", conflicts, want)
	}
	// A rerun conflicts on every job and grants nothing more.
	again, err := st.WorkunitValidateBatch(ctx, p)
	if err != nil || len(again) != len(p.Jobs) {
		t.Errorf("WorkunitValidateBatch again = %v, %v; want every job conflicting", again, err)
	}
	// a's three verdicts and b's two, once: not the conflicting jobs', not
	// e's inconclusive ones, not the rerun's.
	if got := throughputSince(t, st, vt0-60); got.Hour.Validated != 5 || got.Day != got.Hour {
		t.Errorf("throughput after the batch = %+v, want 5 results validated in the hour", got)
	}

	for _, x := range []struct {
		name   string
		f      validateFixture
		canon  int64
		credit float64
		assim  state.AssimilateState
		target int
		need   bool
	}{
		{"a", a, a.results[0].ID, 50, state.AssimilateReady, 2, false},
		{"b", b, b.results[0].ID, 30, state.AssimilateReady, 2, false},
		{"c (validated elsewhere)", c, 0, 0, state.AssimilateInit, 2, false},
		{"d (instance judged meanwhile)", d, 0, 0, state.AssimilateInit, 2, true},
		{"e (inconclusive)", e, 0, 0, state.AssimilateInit, 3, false},
		{"f (canonical already)", f, f.results[0].ID, 0, state.AssimilateInit, 2, true},
	} {
		wu := storetest.Workunit(t, st, x.f.wuID)
		if wu.CanonicalResultID != x.canon || wu.CanonicalCredit != x.credit || wu.AssimilateState != x.assim ||
			wu.TargetNResults != x.target || wu.NeedValidate != x.need {
			t.Errorf("job %s = canonical %d credit %g assimilate %v target %d need_validate %v; want %d, %g, %v, %d, %v",
				x.name, wu.CanonicalResultID, wu.CanonicalCredit, wu.AssimilateState, wu.TargetNResults, wu.NeedValidate,
				x.canon, x.credit, x.assim, x.target, x.need)
		}
		if x.need || x.name == "c (validated elsewhere)" {
			continue
		}
		if wu.TransitionTime != vt0 || wu.ModTime != vt0 {
			t.Errorf("job %s transition_time %d mod_time %d, want %d (the trigger)", x.name, wu.TransitionTime, wu.ModTime, vt0)
		}
	}
	for _, x := range []struct {
		name   string
		id     int64
		vs     state.ValidateState
		o      state.Outcome
		credit float64
	}{
		{"a0", a.results[0].ID, state.ValidateValid, state.OutcomeSuccess, 50},
		{"a2", a.results[2].ID, state.ValidateInvalid, state.OutcomeValidateError, 0},
		{"b1", b.results[1].ID, state.ValidateValid, state.OutcomeSuccess, 30},
		{"d0 (its job conflicted)", d.results[0].ID, state.ValidateInit, state.OutcomeSuccess, 0},
		{"e1", e.results[1].ID, state.ValidateInconclusive, state.OutcomeSuccess, 0},
		{"g0 (its job conflicted)", g.results[0].ID, state.ValidateInit, state.OutcomeSuccess, 0},
	} {
		r := storetest.Result(t, st, x.id)
		if r.ValidateState != x.vs || r.Outcome != x.o || r.GrantedCredit != x.credit {
			t.Errorf("result %s = %v %v credit %g, want %v %v %g", x.name, r.ValidateState, r.Outcome, r.GrantedCredit,
				x.vs, x.o, x.credit)
		}
	}
	// Volunteer 0 got 50 + 30 in one grant; volunteer 2 was invalid (a)
	// then valid (b), in the batch's order.
	for i, want := range []struct {
		total, avg, avgTime float64
		consecutiveValid    int
		errorStreak         int
	}{
		{80, store.ExpavgCredit(100, vt0-day, 80, vt0), vt0, 2, 0},
		{50, store.ExpavgCredit(0, 0, 50, vt0), vt0, 1, 0},
		{30, store.ExpavgCredit(0, 0, 30, vt0), vt0, 1, 0},
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

func TestWorkunitValidateBatchOnlyInvalidKeepsCredit(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "i", 1)
	storetest.Exec(t, st, `UPDATE host SET expavg_credit = 100, expavg_time = ?, consecutive_valid = 4 WHERE id = ?`,
		vt0-day, hosts[0])
	f := newValidateFixture(t, st, "job", 1, users, hosts)
	_, err := st.WorkunitValidateBatch(ctx, store.WorkunitValidateBatchParams{Now: vt0, Jobs: []store.WorkunitValidateParams{
		{ID: f.wuID, Results: []store.ResultValidation{{ID: f.results[0].ID, UserID: users[0], HostID: hosts[0],
			ValidateState: state.ValidateInvalid, Outcome: state.OutcomeSuccess}}},
	}})
	if err != nil {
		t.Fatalf("WorkunitValidateBatch: %v", err)
	}
	h, err := st.HostGet(ctx, hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	if h.TotalCredit != 0 || h.ExpavgCredit != 100 || h.ExpavgTime != vt0-day || h.ConsecutiveValid != 0 || h.ErrorStreak != 1 {
		t.Errorf("host after an invalid verdict = total %g expavg %g at %g, consecutive_valid %d error_streak %d; "+
			"want 0, 100 at %d (untouched), 0, 1", h.TotalCredit, h.ExpavgCredit, h.ExpavgTime, h.ConsecutiveValid,
			h.ErrorStreak, vt0-day)
	}
}

func TestWorkunitValidateBatchConcurrentCreditIsNotLost(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "c", 4)
	const perBatch, batches = 10, 4
	var params []store.WorkunitValidateBatchParams
	for b := range batches {
		p := store.WorkunitValidateBatchParams{Now: vt0}
		for j := range perBatch {
			// Every batch credits every volunteer, in an order of its own.
			i0, i1 := (b+j)%4, (b+j+1)%4
			f := newValidateFixture(t, st, fmt.Sprintf("job%d_%d", b, j), 2, []int64{users[i0], users[i1]},
				[]int64{hosts[i0], hosts[i1]})
			p.Jobs = append(p.Jobs, store.WorkunitValidateParams{ID: f.wuID, CanonicalResultID: f.results[0].ID,
				CanonicalCredit: 1, Results: []store.ResultValidation{
					{ID: f.results[0].ID, UserID: users[i0], HostID: hosts[i0], ValidateState: state.ValidateValid, GrantedCredit: 1},
					{ID: f.results[1].ID, UserID: users[i1], HostID: hosts[i1], ValidateState: state.ValidateValid, GrantedCredit: 1},
				}})
		}
		params = append(params, p)
	}
	var wg sync.WaitGroup
	errs := make([]error, batches)
	for b := range batches {
		wg.Go(func() {
			conflicts, err := st.WorkunitValidateBatch(ctx, params[b])
			if err == nil && len(conflicts) > 0 {
				err = fmt.Errorf("conflicts %v", conflicts)
			}
			errs[b] = err
		})
	}
	wg.Wait()
	for b, err := range errs {
		if err != nil {
			t.Errorf("WorkunitValidateBatch %d: %v", b, err)
		}
	}
	var total float64
	for i := range users {
		u, err := st.UserGet(ctx, users[i])
		if err != nil {
			t.Fatal(err)
		}
		h, err := st.HostGet(ctx, hosts[i])
		if err != nil {
			t.Fatal(err)
		}
		if u.TotalCredit != h.TotalCredit || h.ConsecutiveValid != int(h.TotalCredit) {
			t.Errorf("volunteer %d: user credit %g, host credit %g, consecutive_valid %d; want all equal",
				i, u.TotalCredit, h.TotalCredit, h.ConsecutiveValid)
		}
		total += u.TotalCredit
	}
	if want := float64(2 * perBatch * batches); total != want {
		t.Errorf("credit granted in all = %g, want %g (none lost)", total, want)
	}
}
