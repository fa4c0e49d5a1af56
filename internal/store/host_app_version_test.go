package store_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// hav returns host hostID's host_app_version row for version avID (zero if
// none).
func hav(t *testing.T, st *store.Store, hostID, avID int64) row.HostAppVersion {
	t.Helper()
	rows, err := st.HostAppVersionListByHost(context.Background(), hostID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.AppVersionID == avID {
			return r
		}
	}
	return row.HostAppVersion{}
}

// sendAndCount commits the send p in a batch of its own, then writes the
// jobs it counted in another, as a scheduler does (it keeps the counts in
// memory and writes them with a later commit); it returns the send's
// outcome.
func (f schedFixture) sendAndCount(t *testing.T, p store.SchedSend) error {
	t.Helper()
	ctx := context.Background()
	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{p}})
	if err != nil {
		return err
	}
	if out.Sends[0] != nil {
		return out.Sends[0]
	}
	_, err = f.st.SchedulerCommit(ctx, store.SchedBatch{JobsToday: out.JobsToday})
	return err
}

// TestSchedulerCommitCountsJobsToday: a send's batch counts it in its
// outcome (one job of the version on the send's day) and writes no
// n_jobs_today; batches writing such counts, concurrently, add up (a
// relative update loses none); an anonymous-platform send counts under its
// generalized id; a new day starts the count again and a count stamped with
// an earlier day (a scheduler whose clock is behind) does not set it back.
func TestSchedulerCommitCountsJobsToday(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	const day = 20000
	now := int64(day*86400 + 3600)
	const n = 24
	sends := make([]store.SchedSend, n+4)
	for i := range sends {
		wu := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: fmt.Sprintf("q%d", i),
			TransitionTime: state.NoTransition, DelayBound: 100})
		r := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu.ID,
			ServerState: state.ServerUnsent, Name: fmt.Sprintf("q%d_0", i)})
		sends[i] = store.SchedSend{ResultID: r.ID, WorkunitID: wu.ID, HostID: f.host1, UserID: f.user,
			AppVersionID: 7, AppVersionNum: 100, ReportDeadline: now + 100, Now: now}
	}

	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: sends[n+3:]})
	if err == nil {
		err = out.Sends[0]
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []decide.HostAppVersionDelta{{HostID: f.host1, AppVersionID: 7, Sent: 1, Day: day}}
	if !reflect.DeepEqual(out.JobsToday, want) {
		t.Fatalf("a send's outcome counts %+v, want %+v", out.JobsToday, want)
	}
	if h := hav(t, f.st, f.host1, 7); h.NJobsToday != 0 {
		t.Fatalf("a send's own batch wrote n_jobs_today %d, want 0 (its scheduler writes the count later)", h.NJobsToday)
	}
	if _, err := f.st.SchedulerCommit(ctx, store.SchedBatch{JobsToday: out.JobsToday}); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := f.sendAndCount(t, sends[i]); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent send: %v", err)
	}
	if h := hav(t, f.st, f.host1, 7); h.NJobsToday != n+1 || h.Day != day {
		t.Fatalf("after %d concurrent counts on day %d: n_jobs_today %d, day %d", n+1, day, h.NJobsToday, h.Day)
	}

	anon := sends[n]
	anon.AppVersionID, anon.Resource = 0, hostav.AnonNVIDIA
	if err := f.sendAndCount(t, anon); err != nil {
		t.Fatal(err)
	}
	if h := hav(t, f.st, f.host1, hostav.GeneralizedID(1, hostav.AnonNVIDIA)); h.NJobsToday != 1 || h.Day != day {
		t.Fatalf("anonymous-platform NVIDIA send: row %+v, want 1 job on day %d", h, day)
	}

	tomorrow := sends[n+1]
	tomorrow.Now += 86400
	if err := f.sendAndCount(t, tomorrow); err != nil {
		t.Fatal(err)
	}
	if h := hav(t, f.st, f.host1, 7); h.NJobsToday != 1 || h.Day != day+1 {
		t.Fatalf("send on the next day: n_jobs_today %d, day %d; want 1, %d", h.NJobsToday, h.Day, day+1)
	}
	late := sends[n+2]
	if err := f.sendAndCount(t, late); err != nil {
		t.Fatal(err)
	}
	if h := hav(t, f.st, f.host1, 7); h.NJobsToday != 1 || h.Day != day+1 {
		t.Fatalf("send stamped a day earlier: n_jobs_today %d, day %d; want 1, %d unchanged", h.NJobsToday, h.Day, day+1)
	}
}

// TestSchedulerCommitErrorShrinksQuota: a reported CLIENT_ERROR does to
// max_jobs_per_day, in SQL on the row it has not read, what hostav.AddError
// does, ends the valid streak and counts the error; a success does not
// touch the quota.
func TestSchedulerCommitErrorShrinksQuota(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	const quota = 50
	next := 0
	inProgress := func(avID int64) store.SchedReport {
		next++
		wu := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: fmt.Sprintf("e%d", next),
			TransitionTime: state.NoTransition})
		r := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu.ID,
			ServerState: state.ServerInProgress, Host: f.host1, SentTime: 10, AppVersionID: avID,
			Name: fmt.Sprintf("e%d_0", next)})
		return store.SchedReport{ResultID: r.ID, WorkunitID: wu.ID, HostID: f.host1, Outcome: state.OutcomeClientError,
			Now: 100}
	}
	h1, err := f.st.HostGet(ctx, f.host1)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		start, errors, successes int
		exists                   bool
	}{
		{0, 1, 0, false}, {0, 2, 0, true}, {quota, 1, 0, true}, {quota + 30, 1, 0, true}, {10, 3, 1, true},
		{2, 1, 0, true}, {1, 2, 0, true}, {7, 0, 2, true},
	} {
		avID := int64(100 + i)
		if tc.exists {
			storetest.Exec(t, f.st, `INSERT INTO host_app_version (host_id, app_version_id, max_jobs_per_day,
consecutive_valid, n_errors) VALUES (?, ?, ?, 5, 1)`, f.host1, avID, tc.start)
		}
		var reps []store.SchedReport
		for range tc.errors {
			reps = append(reps, inProgress(avID))
		}
		for range tc.successes {
			r := inProgress(avID)
			r.Outcome = state.OutcomeSuccess
			reps = append(reps, r)
		}
		out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Reports: reps, Hosts: []store.SchedHost{{Host: h1}},
			DailyResultQuota: quota})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Reports {
			if o.Err != nil {
				t.Fatalf("report: %v", o.Err)
			}
		}
		want := row.HostAppVersion{MaxJobsPerDay: tc.start, ConsecutiveValid: 5, NErrors: 1}
		if !tc.exists {
			want = row.HostAppVersion{}
		}
		for range tc.errors {
			want = hostav.AddError(want, quota)
		}
		got := hav(t, f.st, f.host1, avID)
		if tc.errors == 0 && !tc.exists {
			continue
		}
		if got.MaxJobsPerDay != want.MaxJobsPerDay || got.ConsecutiveValid != want.ConsecutiveValid ||
			got.NErrors != want.NErrors {
			t.Errorf("quota %d, %d errors, %d successes: row %+v; want max_jobs_per_day %d, consecutive_valid %d, n_errors %d (hostav.AddError)",
				tc.start, tc.errors, tc.successes, got, want.MaxJobsPerDay, want.ConsecutiveValid, want.NErrors)
		}
	}

	// No project quota: errors are counted, the quota is left alone.
	storetest.Exec(t, f.st, `INSERT INTO host_app_version (host_id, app_version_id, max_jobs_per_day) VALUES (?, 300, 9)`, f.host1)
	if _, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Reports: []store.SchedReport{inProgress(300)},
		Hosts: []store.SchedHost{{Host: h1}}}); err != nil {
		t.Fatal(err)
	}
	if got := hav(t, f.st, f.host1, 300); got.MaxJobsPerDay != 9 || got.NErrors != 1 {
		t.Errorf("error without a project quota: row %+v, want max_jobs_per_day 9, n_errors 1", got)
	}
}

// TestValidateTeachesHostAppVersion: a valid verdict adds the result's
// elapsed time per estimated FLOP and its turnaround to its host's row for
// the version, lengthens the streak and doubles a shrunk quota back up to
// the project's; an invalid one ends the streak and creates the row it
// needs; both paths (batch and single job) do it. Then, end to end, a
// reported error shrinks the quota and a valid result grows it back.
func TestValidateTeachesHostAppVersion(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "h", 2)
	const quota, av = 10, 7
	storetest.Exec(t, st, `INSERT INTO host_app_version (host_id, app_version_id, max_jobs_per_day, n_errors)
VALUES (?, ?, 1, 5)`, hosts[0], av)
	job := func(name string, elapsed float64) (validateFixture, store.WorkunitValidateParams) {
		f := newValidateFixture(t, st, name, 2, users, hosts)
		storetest.Exec(t, st, `UPDATE workunit SET rsc_fpops_est = 1e12 WHERE id = ?`, f.wuID)
		storetest.Exec(t, st, `UPDATE result SET app_version_id = ?, elapsed_time = ?, sent_time = 1000,
received_time = 4600 WHERE workunitid = ?`, av, elapsed, f.wuID)
		return f, store.WorkunitValidateParams{ID: f.wuID, CanonicalResultID: f.results[0].ID, CanonicalCredit: 1,
			DailyResultQuota: quota, Results: []store.ResultValidation{
				{ID: f.results[0].ID, UserID: users[0], HostID: hosts[0], ValidateState: state.ValidateValid,
					Outcome: state.OutcomeSuccess, GrantedCredit: 1},
				{ID: f.results[1].ID, UserID: users[1], HostID: hosts[1], ValidateState: state.ValidateInvalid,
					Outcome: state.OutcomeSuccess},
			}}
	}
	_, p := job("v0", 1000)
	if _, err := st.WorkunitValidateBatch(ctx, store.WorkunitValidateBatchParams{Now: vt0, Jobs: []store.WorkunitValidateParams{p},
		DailyResultQuota: quota}); err != nil {
		t.Fatal(err)
	}
	h := hav(t, st, hosts[0], av)
	if h.EtN != 1 || h.EtMedian != 1e-9 || h.EtAvg != 1e-9 || h.TurnaroundN != 1 || h.TurnaroundAvg != 3600 ||
		h.ConsecutiveValid != 1 || h.NValid != 1 || h.MaxJobsPerDay != 2 || h.NErrors != 5 {
		t.Errorf("after a valid result of 1000 s for 1e12 FLOPs: %+v; want et 1e-9 (n 1), turnaround 3600, streak 1, n_valid 1, quota 2, n_errors 5", h)
	}
	if h := hav(t, st, hosts[1], av); h.HostID != hosts[1] || h.EtN != 0 || h.NValid != 0 || h.ConsecutiveValid != 0 {
		t.Errorf("invalid result's host: row %+v, want created, nothing learnt", h)
	}
	var quotas []int
	for i, el := range []float64{2000, 3000, 1500, 2500} {
		_, p := job(fmt.Sprintf("v%d", i+1), el)
		if err := st.WorkunitValidate(ctx, p); err != nil {
			t.Fatal(err)
		}
		quotas = append(quotas, hav(t, st, hosts[0], av).MaxJobsPerDay)
	}
	h = hav(t, st, hosts[0], av)
	if want := []int{4, 8, 10, 10}; !slices.Equal(quotas, want) || h.EtN != 5 || h.NValid != 5 || h.ConsecutiveValid != 5 {
		t.Errorf("after 4 more valid results: quotas %v, row %+v; want quotas %v, 5 samples, 5 valid in a row", quotas, h, want)
	}
	if want := 2000e-12; math.Abs(h.EtAvg-want) > want*1e-9 {
		t.Errorf("et_avg %g, want the mean %g", h.EtAvg, want)
	}

	// A reported error shrinks the quota (10 → 9) and ends the streak; a
	// valid result doubles it back to 10.
	wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "err", TransitionTime: state.NoTransition}).ID
	r := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: state.ServerInProgress,
		Host: hosts[0], SentTime: 10, AppVersionID: av, Name: "err_0"}).ID
	hrow, err := st.HostGet(ctx, hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SchedulerCommit(ctx, store.SchedBatch{DailyResultQuota: quota,
		Reports: []store.SchedReport{{ResultID: r, WorkunitID: wu, HostID: hosts[0], Outcome: state.OutcomeClientError, Now: 50}},
		Hosts:   []store.SchedHost{{Host: hrow}}}); err != nil {
		t.Fatal(err)
	}
	if h := hav(t, st, hosts[0], av); h.MaxJobsPerDay != quota-1 || h.ConsecutiveValid != 0 || h.NErrors != 6 {
		t.Errorf("after a reported error: %+v; want quota %d, streak 0, n_errors 6", h, quota-1)
	}
	_, p = job("v9", 1000)
	if err := st.WorkunitValidate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if h := hav(t, st, hosts[0], av); h.MaxJobsPerDay != quota || h.ConsecutiveValid != 1 || h.EtN != 6 {
		t.Errorf("valid result after the error: %+v; want quota %d, streak 1, 6 samples", h, quota)
	}
}

// TestHostAppVersionWritersLoseNothing: validators' verdicts, reported
// errors and sends land on one host_app_version row at once; every count
// each writer adds is there at the end, and nothing deadlocks for good.
func TestHostAppVersionWritersLoseNothing(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "w", 1)
	user, host := users[0], hosts[0]
	const av, quota, n = 7, 20, 8
	hostRow, err := st.HostGet(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	var validations []store.WorkunitValidateParams
	var reports []store.SchedReport
	var sends []store.SchedSend
	for i := range n {
		f := newValidateFixture(t, st, fmt.Sprintf("v%d", i), 1, users, hosts)
		storetest.Exec(t, st, `UPDATE workunit SET rsc_fpops_est = 1e12 WHERE id = ?`, f.wuID)
		storetest.Exec(t, st, `UPDATE result SET app_version_id = ?, elapsed_time = ? WHERE id = ?`, av, 1000+i, f.results[0].ID)
		validations = append(validations, store.WorkunitValidateParams{ID: f.wuID, Now: vt0, DailyResultQuota: quota,
			CanonicalResultID: f.results[0].ID, CanonicalCredit: 1, Results: []store.ResultValidation{{ID: f.results[0].ID,
				UserID: user, HostID: host, ValidateState: state.ValidateValid, Outcome: state.OutcomeSuccess, GrantedCredit: 1}}})

		wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: 1, Name: fmt.Sprintf("e%d", i),
			TransitionTime: state.NoTransition}).ID
		r := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: state.ServerInProgress,
			Host: host, User: user, SentTime: 10, AppVersionID: av, Name: fmt.Sprintf("e%d_0", i)}).ID
		reports = append(reports, store.SchedReport{ResultID: r, WorkunitID: wu, HostID: host,
			Outcome: state.OutcomeClientError, Now: vt0})

		wu = storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: 1, Name: fmt.Sprintf("s%d", i),
			TransitionTime: state.NoTransition, DelayBound: 100}).ID
		r = storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: state.ServerUnsent,
			Name: fmt.Sprintf("s%d_0", i)}).ID
		sends = append(sends, store.SchedSend{ResultID: r, WorkunitID: wu, HostID: host, UserID: user, AppVersionID: av,
			ReportDeadline: vt0 + 100, Now: vt0})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Go(func() {
			if err := st.WorkunitValidate(ctx, validations[i]); err != nil {
				errs <- fmt.Errorf("validate: %w", err)
			}
		})
		wg.Go(func() {
			out, err := st.SchedulerCommit(ctx, store.SchedBatch{DailyResultQuota: quota,
				Reports: reports[i : i+1], Hosts: []store.SchedHost{{Host: hostRow}}})
			if err == nil {
				err = out.Reports[0].Err
			}
			if err != nil {
				errs <- fmt.Errorf("report: %w", err)
			}
		})
		wg.Go(func() {
			out, err := st.SchedulerCommit(ctx, store.SchedBatch{DailyResultQuota: quota, Sends: sends[i : i+1]})
			if err == nil {
				err = out.Sends[0]
			}
			if err == nil {
				// Written later by its scheduler, concurrently with the rest.
				_, err = st.SchedulerCommit(ctx, store.SchedBatch{DailyResultQuota: quota, JobsToday: out.JobsToday})
			}
			if err != nil {
				errs <- fmt.Errorf("send: %w", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	h := hav(t, st, host, av)
	if h.EtN != n || h.NValid != n || h.NErrors != n || h.NJobsToday != n || h.Day != hostav.Day(vt0) {
		t.Errorf("after %d verdicts, errors and sends at once: row %+v; want et_n, n_valid, n_errors, n_jobs_today all %d",
			n, h, n)
	}
	if h.MaxJobsPerDay < 1 || h.MaxJobsPerDay > quota {
		t.Errorf("max_jobs_per_day %d, want within 1..%d", h.MaxJobsPerDay, quota)
	}
}
