package validator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const (
	t0      = 1_700_000_000
	fanoutN = 16
	// fpopsDay is a day of a 1 GFLOPS computer: 200 credits.
	fpopsDay = 86400e9
)

type bundle struct {
	st     *store.Store
	upload string
	appID  int64
	m      *Metrics
	svc    *Service
	// now is the service's clock, in Unix seconds.
	now int64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}, nil)
}

// setupApp is setup with app as the validated app and c as the checker.
func setupApp(t *testing.T, app storetest.AppOptions, c Checker) *bundle {
	t.Helper()
	b := &bundle{st: storetest.New(t), upload: t.TempDir(), m: NewMetrics(prometheus.NewRegistry()), now: t0}
	b.appID = storetest.App(t, b.st, app).ID
	b.svc = b.serviceWith(Config{App: app.Name, Batch: 100}, c)
	return b
}

// service returns a validator with the bitwise checker on b's store,
// upload directory and clock.
func (b *bundle) service(cfg Config) *Service { return b.serviceWith(cfg, nil) }

// serviceWith is service with checker c; cfg's zero Mod, Batch and Workers
// are the flags' defaults.
func (b *bundle) serviceWith(cfg Config, c Checker) *Service {
	cfg.UploadDir, cfg.Fanout = b.upload, fanoutN
	cfg = withDefaults(cfg)
	return mustNew(New(cfg, Deps{Store: b.st, Checker: c, Metrics: b.m, Now: func() time.Time { return time.Unix(b.now, 0) }}))
}

// withDefaults sets cfg's zero Mod, Batch and Workers to the flags'
// defaults.
func withDefaults(cfg Config) Config {
	if cfg.Mod == 0 {
		cfg.Mod = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = 500
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	return cfg
}

// mustNew returns the Service New made, and panics with New's error for a
// test's invalid Config.
func mustNew(s *Service, err error) *Service {
	if err != nil {
		panic(fmt.Sprintf("validator.New: %v", err))
	}
	return s
}

// addJob inserts a job of one day's computing awaiting validation.
func (b *bundle) addJob(t *testing.T, name string, mod ...func(*storetest.JobOptions)) int64 {
	t.Helper()
	wu := storetest.JobOptions{CreateTime: t0, App: b.appID, Name: name, RscFpopsEst: fpopsDay, MinQuorum: 2,
		TargetNResults: 2, MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, NeedValidate: true,
		TransitionTime: state.NoTransition}
	for _, m := range mod {
		m(&wu)
	}
	return storetest.Job(t, b.st, wu).ID
}

// volunteer makes a user with one host and returns their ids.
func (b *bundle) volunteer(t *testing.T, email string) (userID, hostID int64) {
	t.Helper()
	userID = storetest.User(t, b.st, storetest.UserOptions{CreateTime: t0, EmailAddr: email, Name: email, Authenticator: "auth-" + email}).ID
	hostID = storetest.Host(t, b.st, storetest.HostOptions{CreateTime: t0, User: userID}).ID
	return userID, hostID
}

// addSuccess inserts a reported success of job wuID by the volunteer, and
// uploads output as its single output file unless output is nil.
func (b *bundle) addSuccess(t *testing.T, wuID int64, name string, userID, hostID int64, output []byte, vs state.ValidateState) int64 {
	t.Helper()
	doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
	if err != nil {
		t.Fatalf("FormatResult: %v", err)
	}
	id := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: t0, Job: wuID, Name: name,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: vs, User: userID,
		Host: hostID, App: b.appID, XMLDocIn: doc}).ID
	if output != nil {
		path, err := fanout.Path(b.upload, jobxml.OutputName(name, 0), fanoutN)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, output, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
			t.Fatal(err)
		}
	}
	return id
}

func (b *bundle) result(t *testing.T, id int64) row.Result {
	t.Helper()
	return storetest.Result(t, b.st, id)
}

func (b *bundle) job(t *testing.T, id int64) row.Workunit {
	t.Helper()
	return storetest.Workunit(t, b.st, id)
}

func (b *bundle) credit(t *testing.T, userID, hostID int64) (float64, float64) {
	t.Helper()
	u, err := b.st.UserGet(context.Background(), userID)
	if err != nil {
		t.Fatalf("UserGet: %v", err)
	}
	h, err := b.st.HostGet(context.Background(), hostID)
	if err != nil {
		t.Fatalf("HostGet: %v", err)
	}
	return u.TotalCredit, h.TotalCredit
}

func runOnce(t *testing.T, s *Service) int {
	t.Helper()
	n, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

func TestQuorumAgreesCanonicalAndCreditOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	u1, h1 := b.volunteer(t, "a@example.com")
	u2, h2 := b.volunteer(t, "b@example.com")
	r1 := b.addSuccess(t, wuID, "job_0", u1, h1, []byte("42\n"), state.ValidateInit)
	r2 := b.addSuccess(t, wuID, "job_1", u2, h2, []byte("42\n"), state.ValidateInit)

	if n := runOnce(t, b.svc); n != 1 {
		t.Fatalf("RunOnce = %d jobs, want 1", n)
	}
	wu := b.job(t, wuID)
	if wu.CanonicalResultID != r1 || wu.CanonicalCredit != 200 || wu.AssimilateState != state.AssimilateReady ||
		wu.NeedValidate || wu.TransitionTime != t0 {
		t.Errorf("job = canonical %d credit %g assimilate %v need_validate %v transition_time %d; want %d, 200, ready, false, %d",
			wu.CanonicalResultID, wu.CanonicalCredit, wu.AssimilateState, wu.NeedValidate, wu.TransitionTime, r1, t0)
	}
	for _, id := range []int64{r1, r2} {
		if r := b.result(t, id); r.ValidateState != state.ValidateValid || r.GrantedCredit != 200 {
			t.Errorf("result %d = %v credit %g, want valid, 200", id, r.ValidateState, r.GrantedCredit)
		}
	}
	for _, v := range [][2]int64{{u1, h1}, {u2, h2}} {
		if uc, hc := b.credit(t, v[0], v[1]); uc != 200 || hc != 200 {
			t.Errorf("user %d / host %d credit = %g / %g, want 200 / 200", v[0], v[1], uc, hc)
		}
	}

	// Nothing is left; and were the flag set again (a rerun), judged
	// instances are not candidates and no credit is granted twice.
	if n := runOnce(t, b.svc); n != 0 {
		t.Errorf("second RunOnce = %d jobs, want 0", n)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET need_validate = 1 WHERE id = ?`, wuID); err != nil {
		t.Fatal(err)
	}
	runOnce(t, b.svc)
	for _, v := range [][2]int64{{u1, h1}, {u2, h2}} {
		if uc, hc := b.credit(t, v[0], v[1]); uc != 200 || hc != 200 {
			t.Errorf("after a rerun user %d / host %d credit = %g / %g, want still 200 / 200", v[0], v[1], uc, hc)
		}
	}
	if got := testutil.ToFloat64(b.m.credit); got != 400 {
		t.Errorf("credit_granted_total = %v, want 400", got)
	}
	if got := testutil.ToFloat64(b.m.results.WithLabelValues("valid")); got != 2 {
		t.Errorf(`results_total{outcome="valid"} = %v, want 2`, got)
	}
}

func TestCreditGrantedOnlyWithVerdict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	u, h := b.volunteer(t, "a@example.com")
	rid := b.addSuccess(t, wuID, "job_0", u, h, []byte("x"), state.ValidateInit)
	p := store.WorkunitValidateParams{ID: wuID, Now: t0, CanonicalResultID: rid, CanonicalCredit: 5,
		Results: []store.ResultValidation{{ID: rid, UserID: u, HostID: h, ValidateState: state.ValidateValid,
			Outcome: state.OutcomeSuccess, GrantedCredit: 5}}}
	if err := b.st.WorkunitValidate(context.Background(), p); err != nil {
		t.Fatalf("WorkunitValidate: %v", err)
	}
	// The retries come later, as after a crash: with the same Now every
	// statement would change nothing and conflict whatever its WHERE says.
	p.Now = t0 + 60
	if err := b.st.WorkunitValidate(context.Background(), p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitValidate again = %v, want ErrConflict", err)
	}
	// Even with the job flagged again, the instance's verdict stands and the
	// whole second write is rolled back.
	if _, err := b.st.DB().Exec(`UPDATE workunit SET need_validate = 1, canonical_resultid = 0 WHERE id = ?`, wuID); err != nil {
		t.Fatal(err)
	}
	if err := b.st.WorkunitValidate(context.Background(), p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitValidate of a judged instance = %v, want ErrConflict", err)
	}
	if uc, hc := b.credit(t, u, h); uc != 5 || hc != 5 {
		t.Errorf("credit after three attempts = %g / %g, want 5 / 5", uc, hc)
	}
	if wu := b.job(t, wuID); !wu.NeedValidate {
		t.Errorf("need_validate = false after a rolled-back write, want it left set")
	}
}

func TestDisagreementIsInconclusiveAndWantsAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.TransitionTime = t0 + 50 })
	u, h := b.volunteer(t, "a@example.com")
	r1 := b.addSuccess(t, wuID, "job_0", u, h, []byte("1"), state.ValidateInit)
	r2 := b.addSuccess(t, wuID, "job_1", u, h, []byte("2"), state.ValidateInit)
	runOnce(t, b.svc)
	wu := b.job(t, wuID)
	if wu.CanonicalResultID != 0 || wu.TargetNResults != 3 || wu.NeedValidate || wu.TransitionTime != t0 {
		t.Errorf("job = canonical %d target %d need_validate %v transition_time %d; want 0, 3, false, %d",
			wu.CanonicalResultID, wu.TargetNResults, wu.NeedValidate, wu.TransitionTime, t0)
	}
	for _, id := range []int64{r1, r2} {
		if r := b.result(t, id); r.ValidateState != state.ValidateInconclusive || r.GrantedCredit != 0 {
			t.Errorf("result %d = %v credit %g, want inconclusive, 0", id, r.ValidateState, r.GrantedCredit)
		}
	}
	if uc, _ := b.credit(t, u, h); uc != 0 {
		t.Errorf("user credit = %g, want 0", uc)
	}

	// The third instance sides with the second.
	r3 := b.addSuccess(t, wuID, "job_2", u, h, []byte("2"), state.ValidateInit)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET need_validate = 1 WHERE id = ?`, wuID); err != nil {
		t.Fatal(err)
	}
	runOnce(t, b.svc)
	if wu := b.job(t, wuID); wu.CanonicalResultID != r2 {
		t.Errorf("canonical = %d, want %d (lowest of the agreeing pair)", wu.CanonicalResultID, r2)
	}
	want := map[int64]state.ValidateState{r1: state.ValidateInvalid, r2: state.ValidateValid, r3: state.ValidateValid}
	for id, vs := range want {
		if r := b.result(t, id); r.ValidateState != vs {
			t.Errorf("result %d = %v, want %v", id, r.ValidateState, vs)
		}
	}
	if uc, _ := b.credit(t, u, h); uc != 400 {
		t.Errorf("user credit = %g, want 400 (two valid)", uc)
	}
}

func TestTargetBumpBoundedByMaxTotal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxTotalResults = 2 })
	u, h := b.volunteer(t, "a@example.com")
	b.addSuccess(t, wuID, "job_0", u, h, []byte("1"), state.ValidateInit)
	b.addSuccess(t, wuID, "job_1", u, h, []byte("2"), state.ValidateInit)
	runOnce(t, b.svc)
	if wu := b.job(t, wuID); wu.TargetNResults != 2 {
		t.Errorf("target_nresults = %d, want 2 (max_total_results)", wu.TargetNResults)
	}
}

func TestMissingOutputIsValidateError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	u, h := b.volunteer(t, "a@example.com")
	r1 := b.addSuccess(t, wuID, "job_0", u, h, nil, state.ValidateInit)
	r2 := b.addSuccess(t, wuID, "job_1", u, h, []byte("ok"), state.ValidateInit)
	runOnce(t, b.svc)
	if r := b.result(t, r1); r.Outcome != state.OutcomeValidateError || r.ValidateState != state.ValidateInvalid {
		t.Errorf("result without output = %v/%v, want validate_error/invalid", r.Outcome, r.ValidateState)
	}
	if r := b.result(t, r2); r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateInit {
		t.Errorf("result with output = %v/%v, want success/init (waits for a partner)", r.Outcome, r.ValidateState)
	}
	if wu := b.job(t, wuID); wu.NeedValidate || wu.CanonicalResultID != 0 {
		t.Errorf("job = need_validate %v canonical %d, want false, 0", wu.NeedValidate, wu.CanonicalResultID)
	}
	if got := testutil.ToFloat64(b.m.results.WithLabelValues("validate_error")); got != 1 {
		t.Errorf(`results_total{outcome="validate_error"} = %v, want 1`, got)
	}
}

func TestLateResultsAgainstCanonical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	u, h := b.volunteer(t, "a@example.com")
	canon := b.addSuccess(t, wuID, "job_0", u, h, []byte("right"), state.ValidateValid)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ?, canonical_credit = 200 WHERE id = ?`, canon, wuID); err != nil {
		t.Fatal(err)
	}
	good := b.addSuccess(t, wuID, "job_1", u, h, []byte("right"), state.ValidateInit)
	bad := b.addSuccess(t, wuID, "job_2", u, h, []byte("wrong"), state.ValidateInit)
	gone := b.addSuccess(t, wuID, "job_3", u, h, nil, state.ValidateInit)
	runOnce(t, b.svc)
	for id, want := range map[int64]struct {
		vs state.ValidateState
		o  state.Outcome
		c  float64
	}{
		good: {state.ValidateValid, state.OutcomeSuccess, 200},
		bad:  {state.ValidateInvalid, state.OutcomeSuccess, 0},
		gone: {state.ValidateInvalid, state.OutcomeValidateError, 0},
	} {
		if r := b.result(t, id); r.ValidateState != want.vs || r.Outcome != want.o || r.GrantedCredit != want.c {
			t.Errorf("late result %s = %v/%v credit %g, want %v/%v credit %g", r.Name, r.ValidateState, r.Outcome,
				r.GrantedCredit, want.vs, want.o, want.c)
		}
	}
	if wu := b.job(t, wuID); wu.CanonicalResultID != canon || wu.AssimilateState != state.AssimilateDone || wu.NeedValidate {
		t.Errorf("job = canonical %d assimilate %v need_validate %v; want %d unchanged, done, false",
			wu.CanonicalResultID, wu.AssimilateState, wu.NeedValidate, canon)
	}
	if uc, _ := b.credit(t, u, h); uc != 200 {
		t.Errorf("user credit = %g, want 200 (the one late valid result)", uc)
	}
}

func TestCanonicalOutputMissingIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	u, h := b.volunteer(t, "a@example.com")
	canon := b.addSuccess(t, wuID, "job_0", u, h, nil, state.ValidateValid)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, canon, wuID); err != nil {
		t.Fatal(err)
	}
	late := b.addSuccess(t, wuID, "job_1", u, h, []byte("x"), state.ValidateInit)
	if _, err := b.svc.RunOnce(context.Background()); err == nil {
		t.Fatalf("RunOnce with the canonical output missing = nil error, want one (retried later)")
	}
	if got := testutil.ToFloat64(b.m.transient); got != 1 {
		t.Errorf("transient_errors_total = %v, want 1", got)
	}
	if r := b.result(t, late); r.ValidateState != state.ValidateInit {
		t.Errorf("late result = %v, want still init", r.ValidateState)
	}
	// Once the job's files are deleted, there is nothing to compare with.
	if _, err := b.st.DB().Exec(`UPDATE workunit SET file_delete_state = ? WHERE id = ?`, state.FileDeleteDone, wuID); err != nil {
		t.Fatal(err)
	}
	b.now += int64(retryFirst / time.Second)
	runOnce(t, b.svc)
	if r := b.result(t, late); r.ValidateState != state.ValidateTooLate || r.GrantedCredit != 0 {
		t.Errorf("late result after file deletion = %v credit %g, want too_late, 0", r.ValidateState, r.GrantedCredit)
	}
}

func TestOnlyOwnAppAndReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := storetest.App(t, b.st, storetest.AppOptions{CreateTime: t0, Name: "other", UserFriendlyName: "Other"}).ID
	u, h := b.volunteer(t, "a@example.com")
	var ids []int64
	for i := range 8 {
		id := b.addJob(t, fmt.Sprintf("job%d", i))
		b.addSuccess(t, id, fmt.Sprintf("job%d_0", i), u, h, []byte("same"), state.ValidateInit)
		b.addSuccess(t, id, fmt.Sprintf("job%d_1", i), u, h, []byte("same"), state.ValidateInit)
		ids = append(ids, id)
	}
	foreign := b.addJob(t, "foreign", func(wu *storetest.JobOptions) { wu.App = other })
	svc := b.service(Config{App: "demo", Mod: 2, ModIndex: 1, Batch: 3})
	for range 20 {
		if runOnce(t, svc) == 0 {
			break
		}
	}
	split := map[bool]int{}
	for _, id := range ids {
		other := store.Partition(id, 2) != 1
		split[other]++
		if wu := b.job(t, id); wu.NeedValidate != other {
			t.Errorf("replica 1 of 2: job %d need_validate = %v, want %v", id, wu.NeedValidate, other)
		}
	}
	if split[true] == 0 || split[false] == 0 {
		t.Fatalf("jobs %v all hash to one partition of 2: the test needs both", ids)
	}
	if wu := b.job(t, foreign); !wu.NeedValidate {
		t.Errorf("another app's job was validated")
	}
}

func TestUnknownAppIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := mustNew(New(withDefaults(Config{App: "nope", UploadDir: b.upload, Fanout: fanoutN}), Deps{Store: b.st, Metrics: b.m}))
	if _, err := svc.RunOnce(context.Background()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunOnce for app nope = %v, want ErrNotFound", err)
	}
}

func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	storetest.Exec(t, b.st, query, args...)
}

func (b *bundle) host(t *testing.T, id int64) row.Host {
	t.Helper()
	h, err := b.st.HostGet(context.Background(), id)
	if err != nil {
		t.Fatalf("HostGet(%d): %v", id, err)
	}
	return h
}

func TestCreditPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		fixed  float64
		claims [3]float64 // of the two agreeing instances and the cheater
		want   float64
	}{
		{"fpops: from the job's estimate", row.CreditFpops, 0, [3]float64{10, 30, 1000}, 200},
		{"fixed: the job's fixed credit", row.CreditFixed, 7, [3]float64{10, 30, 1000}, 7},
		{"median of two valid claims is the lower, the cheater's left out", row.CreditMedian, 0, [3]float64{10, 30, 1000}, 10},
		{"median with no claims: fpops", row.CreditMedian, 0, [3]float64{0, 0, 1000}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", CreditPolicy: tt.policy}, nil)
			wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.FixedCredit = tt.fixed })
			var users, ids [3]int64
			for i, out := range []string{"right", "right", "wrong"} {
				u, h := b.volunteer(t, fmt.Sprintf("v%d@example.com", i))
				users[i] = u
				ids[i] = b.addSuccess(t, wuID, fmt.Sprintf("job_%d", i), u, h, []byte(out), state.ValidateInit)
				b.exec(t, `UPDATE result SET claimed_credit = ? WHERE id = ?`, tt.claims[i], ids[i])
			}
			runOnce(t, b.svc)
			if wu := b.job(t, wuID); wu.CanonicalResultID != ids[0] || wu.CanonicalCredit != tt.want {
				t.Errorf("job canonical %d credit %g, want %d, %g", wu.CanonicalResultID, wu.CanonicalCredit, ids[0], tt.want)
			}
			for i, want := range []float64{tt.want, tt.want, 0} {
				if r := b.result(t, ids[i]); r.GrantedCredit != want {
					t.Errorf("result %d granted %g, want %g", i, r.GrantedCredit, want)
				}
				if u, err := b.st.UserGet(context.Background(), users[i]); err != nil || u.TotalCredit != want {
					t.Errorf("user %d total_credit %g (%v), want %g", i, u.TotalCredit, err, want)
				}
			}
		})
	}
}

func TestMedianQuorumOfTwoOneHugeClaim(t *testing.T) {
	t.Parallel()
	// The case: two agreeing hosts claim 2.3 and 2.3e13. BOINC
	// granted the lower of two claims; the huge one must not set the
	// credit of either.
	b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", CreditPolicy: row.CreditMedian}, nil)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.RscFpopsBound = 10 * fpopsDay })
	var ids [2]int64
	for i, claim := range []float64{2.3, 2.3e13} {
		u, h := b.volunteer(t, fmt.Sprintf("v%d@example.com", i))
		ids[i] = b.addSuccess(t, wuID, fmt.Sprintf("job_%d", i), u, h, []byte("same"), state.ValidateInit)
		b.exec(t, `UPDATE result SET claimed_credit = ? WHERE id = ?`, claim, ids[i])
	}
	runOnce(t, b.svc)
	for i, id := range ids {
		if r := b.result(t, id); r.ValidateState != state.ValidateValid || r.GrantedCredit != 2.3 {
			t.Errorf("result %d: %v granted %g, want valid, 2.3 (the lower claim)", i, r.ValidateState, r.GrantedCredit)
		}
	}
}

func TestMedianClaimCutByBoundAndHostHistory(t *testing.T) {
	t.Parallel()
	b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", CreditPolicy: row.CreditMedian}, nil)
	single := func(wu *storetest.JobOptions) { wu.MinQuorum, wu.TargetNResults, wu.RscFpopsBound = 1, 1, 10*fpopsDay }
	// A new host alone on a job (a trusted host under adaptive
	// replication) claims far beyond the job's FLOP bound.
	u, h := b.volunteer(t, "new@example.com")
	huge := b.addSuccess(t, b.addJob(t, "huge", single), "huge_0", u, h, []byte("x"), state.ValidateInit)
	b.exec(t, `UPDATE result SET claimed_credit = 2.3e13 WHERE id = ?`, huge)
	runOnce(t, b.svc)
	if r := b.result(t, huge); r.GrantedCredit != HistoryFactor*200 {
		t.Errorf("claim 2.3e13 from a host without a record granted %g, want %g (HistoryFactor times the estimate)",
			r.GrantedCredit, HistoryFactor*200.0)
	}

	// A host whose validated work was worth twice the estimate may claim
	// up to HistoryFactor times that, and no more.
	u2, h2 := b.volunteer(t, "known@example.com")
	for i := range 5 {
		id := b.addSuccess(t, b.addJob(t, fmt.Sprintf("past%d", i), single), fmt.Sprintf("past%d_0", i), u2, h2, []byte("x"), state.ValidateValid)
		b.exec(t, `UPDATE result SET granted_credit = 400 WHERE id = ?`, id)
	}
	b.exec(t, `UPDATE workunit SET need_validate = 0 WHERE name LIKE 'past%'`)
	over := b.addSuccess(t, b.addJob(t, "over", single), "over_0", u2, h2, []byte("x"), state.ValidateInit)
	b.exec(t, `UPDATE result SET claimed_credit = 1900 WHERE id = ?`, over)
	within := b.addSuccess(t, b.addJob(t, "within", single), "within_0", u2, h2, []byte("x"), state.ValidateInit)
	b.exec(t, `UPDATE result SET claimed_credit = 700 WHERE id = ?`, within)
	runOnce(t, b.svc)
	if r := b.result(t, over); r.GrantedCredit != HistoryFactor*400 {
		t.Errorf("claim 1900 from a host whose work was worth 400 per 200-credit job granted %g, want %g",
			r.GrantedCredit, HistoryFactor*400.0)
	}
	if r := b.result(t, within); r.GrantedCredit != 700 {
		t.Errorf("claim 700 within the host's record granted %g, want 700", r.GrantedCredit)
	}
}

func TestKnownAnswerCatchesWrongHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.st.DB().Exec(`INSERT INTO known_answer (create_time, appid, name, input, output) VALUES (?, ?, ?, ?, ?)`,
		t0, b.appID, "ka", []byte("in"), []byte("42\n"))
	if err != nil {
		t.Fatal(err)
	}
	kaID, _ := res.LastInsertId()
	wuID := b.addJob(t, "ka_1_x", func(wu *storetest.JobOptions) {
		wu.MinQuorum, wu.TargetNResults, wu.KnownAnswerID = 1, 1, kaID
	})
	u1, h1 := b.volunteer(t, "cheat@example.com")
	u2, h2 := b.volunteer(t, "honest@example.com")
	b.exec(t, `UPDATE host SET consecutive_valid = 9 WHERE id = ?`, h1)
	wrong := b.addSuccess(t, wuID, "ka_1_x_0", u1, h1, []byte("41\n"), state.ValidateInit)
	runOnce(t, b.svc)
	if r := b.result(t, wrong); r.ValidateState != state.ValidateInvalid || r.GrantedCredit != 0 {
		t.Errorf("wrong answer = %v credit %g, want invalid, 0", r.ValidateState, r.GrantedCredit)
	}
	if h := b.host(t, h1); h.ConsecutiveValid != 0 || h.ErrorStreak != 1 {
		t.Errorf("caught host consecutive_valid %d error_streak %d, want 0, 1", h.ConsecutiveValid, h.ErrorStreak)
	}
	if wu := b.job(t, wuID); wu.CanonicalResultID != 0 || wu.NeedValidate {
		t.Errorf("job canonical %d need_validate %v, want 0, false (another instance is needed)", wu.CanonicalResultID, wu.NeedValidate)
	}

	right := b.addSuccess(t, wuID, "ka_1_x_1", u2, h2, []byte("42\n"), state.ValidateInit)
	b.exec(t, `UPDATE workunit SET need_validate = 1 WHERE id = ?`, wuID)
	// The expected output is cached: a changed row is not read again.
	b.exec(t, `UPDATE known_answer SET output = 'changed' WHERE id = ?`, kaID)
	runOnce(t, b.svc)
	if wu := b.job(t, wuID); wu.CanonicalResultID != right || wu.AssimilateState != state.AssimilateReady {
		t.Errorf("job canonical %d assimilate %v, want %d, ready", wu.CanonicalResultID, wu.AssimilateState, right)
	}
	if h := b.host(t, h2); h.ConsecutiveValid != 1 || h.ErrorStreak != 0 || h.TotalCredit != 200 {
		t.Errorf("honest host consecutive_valid %d error_streak %d credit %g, want 1, 0, 200", h.ConsecutiveValid,
			h.ErrorStreak, h.TotalCredit)
	}
	if _, err := b.st.KnownAnswerGet(ctx, kaID+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KnownAnswerGet(unknown) = %v, want ErrNotFound", err)
	}
}

func TestTransientErrorLeavesJobForLaterPass(t *testing.T) {
	t.Parallel()
	b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo"}, failingChecker{failOn: "flaky"})
	u, h := b.volunteer(t, "a@example.com")
	stuck := b.addJob(t, "stuck")
	b.addSuccess(t, stuck, "stuck_0", u, h, []byte("flaky"), state.ValidateInit)
	b.addSuccess(t, stuck, "stuck_1", u, h, []byte("flaky"), state.ValidateInit)
	fine := b.addJob(t, "fine")
	b.addSuccess(t, fine, "fine_0", u, h, []byte("ok"), state.ValidateInit)
	b.addSuccess(t, fine, "fine_1", u, h, []byte("ok"), state.ValidateInit)

	// One job failing does not fail the pass: the other is validated.
	if n := runOnce(t, b.svc); n != 2 {
		t.Errorf("RunOnce = %d jobs, want 2", n)
	}
	if wu := b.job(t, fine); wu.CanonicalResultID == 0 {
		t.Errorf("the job beside a failing one was not validated")
	}
	if wu := b.job(t, stuck); !wu.NeedValidate || wu.CanonicalResultID != 0 {
		t.Errorf("failing job need_validate %v canonical %d, want true, 0 (left for later)", wu.NeedValidate, wu.CanonicalResultID)
	}
	if got := testutil.ToFloat64(b.m.transient); got != 1 {
		t.Errorf("transient_errors_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.m.retrying); got != 1 {
		t.Errorf("jobs_retrying = %v, want 1", got)
	}
	// It is not tried again at once.
	if n := runOnce(t, b.svc); n != 0 {
		t.Errorf("RunOnce before the retry delay = %d jobs, want 0", n)
	}
	// The second failure in a row, alone in its pass, fails the pass; the
	// delay doubles.
	b.now += int64(retryFirst / time.Second)
	if _, err := b.svc.RunOnce(context.Background()); err == nil {
		t.Errorf("RunOnce with only a failing job = nil, want an error (the loop backs off)")
	}
	if rs := b.svc.retry[stuck]; rs.delay != 2*retryFirst {
		t.Errorf("retry delay after two failures = %s, want %s", rs.delay, 2*retryFirst)
	}
	// Repaired, it is validated once its delay has passed.
	for _, name := range []string{"stuck_0", "stuck_1"} {
		path, _ := fanout.Path(b.upload, jobxml.OutputName(name, 0), fanoutN)
		if err := os.WriteFile(path, []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
			t.Fatal(err)
		}
	}
	b.now += int64(2 * retryFirst / time.Second)
	runOnce(t, b.svc)
	if wu := b.job(t, stuck); wu.NeedValidate || wu.CanonicalResultID == 0 {
		t.Errorf("repaired job need_validate %v canonical %d, want validated", wu.NeedValidate, wu.CanonicalResultID)
	}
	if got := testutil.ToFloat64(b.m.retrying); got != 0 {
		t.Errorf("jobs_retrying = %v, want 0", got)
	}
}

func TestPassesWalkPastJobsThatCannotBeJudged(t *testing.T) {
	t.Parallel()
	b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo"}, failingChecker{failOn: "flaky"})
	u, h := b.volunteer(t, "a@example.com")
	var stuck, fine []int64
	for i := range 6 {
		out := "ok"
		if i < 3 {
			out = "flaky"
		}
		name := fmt.Sprintf("job%d", i)
		id := b.addJob(t, name)
		b.addSuccess(t, id, name+"_0", u, h, []byte(out), state.ValidateInit)
		b.addSuccess(t, id, name+"_1", u, h, []byte(out), state.ValidateInit)
		if i < 3 {
			stuck = append(stuck, id)
		} else {
			fine = append(fine, id)
		}
	}
	// Two rows (one job) per pass: the three failing jobs come first.
	svc := b.serviceWith(Config{App: "demo", Batch: 2}, failingChecker{failOn: "flaky"})
	for range 6 {
		_, _ = svc.RunOnce(context.Background())
	}
	for _, id := range fine {
		if wu := b.job(t, id); wu.NeedValidate {
			t.Errorf("job %d behind failing jobs was never validated", id)
		}
	}
	for _, id := range stuck {
		if wu := b.job(t, id); !wu.NeedValidate {
			t.Errorf("failing job %d lost its need_validate", id)
		}
	}
}

// TestWritableOutputIsNeverValid: an output an upload may still write to
// (never finished by the data server) is not an output at all: its
// instance is judged as one whose output is missing, even when its bytes
// agree with a finished output, and no credit is granted for it.
func TestWritableOutputIsNeverValid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	u1, h1 := b.volunteer(t, "a@example.com")
	u2, h2 := b.volunteer(t, "b@example.com")
	r1 := b.addSuccess(t, wuID, "job_0", u1, h1, []byte("42\n"), state.ValidateInit)
	r2 := b.addSuccess(t, wuID, "job_1", u2, h2, []byte("42\n"), state.ValidateInit)
	path, _ := fanout.Path(b.upload, jobxml.OutputName("job_1", 0), fanoutN)
	if err := os.Chmod(path, outputfile.WritingMode); err != nil {
		t.Fatal(err)
	}
	runOnce(t, b.svc)
	if r := b.result(t, r2); r.Outcome != state.OutcomeValidateError || r.ValidateState != state.ValidateInvalid || r.GrantedCredit != 0 {
		t.Errorf("result with a writable output = %v/%v credit %g, want validate_error/invalid, no credit", r.Outcome,
			r.ValidateState, r.GrantedCredit)
	}
	if r := b.result(t, r1); r.ValidateState == state.ValidateValid {
		t.Errorf("result %d validated against a writable output", r1)
	}
	if wu := b.job(t, wuID); wu.CanonicalResultID != 0 {
		t.Errorf("job canonical %d, want none", wu.CanonicalResultID)
	}
}
