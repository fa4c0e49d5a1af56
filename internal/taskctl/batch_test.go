package taskctl_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// Not parallel: see the note in taskctl_test.go.

func TestAppPolicies(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "ar", "--adaptive-replication", "--credit-policy", "median",
		"--hold-failed-jobs", "--known-answer-fraction", "0.1", "--homogeneous-redundancy", "2")
	a, err := b.st.AppGetByName(ctx, "ar")
	if err != nil || !a.AdaptiveReplication || a.CreditPolicy != "median" || !a.HoldFailedJobs ||
		a.KnownAnswerFraction != 0.1 || a.HomogeneousRedundancy != 2 || a.Weight != 1 {
		t.Fatalf("app added with policies = %+v, %v", a, err)
	}
	b.mustRun(t, "app", "add", "--name", "plain")
	if p, _ := b.st.AppGetByName(ctx, "plain"); p.CreditPolicy != row.CreditFpops || p.AdaptiveReplication {
		t.Fatalf("app added without policy flags = %+v; want fpops, no adaptive replication", p)
	}

	// set changes only what it is given.
	out := b.mustRun(t, "app", "set", "--name", "ar", "--credit-policy", "fixed", "--adaptive-replication=false", "--weight", "2")
	if !strings.Contains(out, "credit_policy=fixed") {
		t.Errorf("app set output = %q", out)
	}
	a2, _ := b.st.AppGetByName(ctx, "ar")
	want := a
	want.CreditPolicy, want.AdaptiveReplication, want.Weight = "fixed", false, 2
	if a2 != want {
		t.Fatalf("app after set = %+v, want %+v", a2, want)
	}
	b.mustRun(t, "app", "set", "--name", "ar", "--deprecated")
	if a3, _ := b.st.AppGetByName(ctx, "ar"); !a3.Deprecated || a3.CreditPolicy != "fixed" {
		t.Fatalf("app after set --deprecated = %+v", a3)
	}

	for _, args := range [][]string{
		{"app", "set", "--name", "ar", "--credit-policy", "bogus"},
		{"app", "set", "--name", "ar", "--known-answer-fraction", "1.5"},
		{"app", "set", "--name", "ar", "--homogeneous-redundancy", "3"},
		{"app", "set", "--name", "ar", "--weight", "0"},
		{"app", "add", "--name", "bad", "--known-answer-fraction", "-1"},
	} {
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("taskctl %s succeeded, want an error", strings.Join(args, " "))
		}
	}
	if _, _, err := b.run(t, "app", "set", "--name", "nosuch", "--weight", "2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("app set on a missing app = %v, want ErrNotFound", err)
	}
}

func TestUserSubmitAllowed(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "sci@example.org", "--name", "Sci", "--submit-allowed"))
	u, err := b.st.UserGetByEmail(ctx, "sci@example.org")
	if err != nil || u.Authenticator != auth || !u.SubmitAllowed {
		t.Fatalf("user created with --submit-allowed = %+v, %v", u, err)
	}
	other := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "vol@example.org", "--name", "Vol"))
	if v, err := b.st.UserGetByEmail(ctx, "vol@example.org"); err != nil || v.Authenticator != other || v.SubmitAllowed {
		t.Fatalf("user created without --submit-allowed = %+v, %v; want it unable to submit", v, err)
	}
	b.mustRun(t, "user", "set", "--email", "sci@example.org", "--submit-allowed=false")
	if u, _ := b.st.UserGet(ctx, u.ID); u.SubmitAllowed {
		t.Fatal("user set --submit-allowed=false left the permission")
	}
	if _, _, err := b.run(t, "user", "set", "--email", "nobody@example.org", "--submit-allowed"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("user set on a missing user = %v, want ErrNotFound", err)
	}
}

func TestKnownAnswerAdd(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "demo")
	in, out := filepath.Join(b.projectDir, "ka.in"), filepath.Join(b.projectDir, "ka.out")
	writeFile(t, in, "the input")
	writeFile(t, out, "the output")
	line, errOut, err := b.run(t, "known-answer", "add", "--app", "demo", "--name", "k1", "--input", in, "--output", out)
	if err != nil || !regexp.MustCompile(`^known_answer [0-9]+ k1\n$`).MatchString(line) ||
		!strings.Contains(errOut, "--known-answer-fraction") {
		t.Fatalf("known-answer add = %q, %q, %v; want the id and a hint to set the fraction", line, errOut, err)
	}
	app, _ := b.st.AppGetByName(ctx, "demo")
	list, err := b.st.KnownAnswerList(ctx, app.ID)
	if err != nil || len(list) != 1 || list[0].Name != "k1" {
		t.Fatalf("known answers = %+v, %v", list, err)
	}
	got, _ := b.st.KnownAnswerListInputs(ctx, []int64{list[0].ID})
	if len(got) != 1 || string(got[0].Input) != "the input" {
		t.Fatalf("stored input = %+v", got)
	}
	if _, _, err := b.run(t, "known-answer", "add", "--app", "demo", "--name", "k1", "--input", in, "--output", out); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("adding k1 again = %v, want ErrDuplicate", err)
	}
	if out := b.mustRun(t, "known-answer", "list", "--app", "demo"); !strings.Contains(out, "k1") {
		t.Fatalf("known-answer list = %q", out)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

var batchLine = regexp.MustCompile(`^batch ([0-9]+) (\S+) ([0-9]+) jobs\n$`)

func TestBatchCommands(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "demo", "--hold-failed-jobs")
	dir := filepath.Join(b.projectDir, "inputs")
	writeFile(t, filepath.Join(dir, "a.txt"), "input a")
	writeFile(t, filepath.Join(dir, "b.txt"), "input b")
	writeFile(t, filepath.Join(dir, "c.txt"), "input c")
	writeFile(t, filepath.Join(dir, ".hidden"), "skipped")

	out := b.mustRun(t, "batch", "submit", "--app", "demo", "--name", "run1", "--input-dir", dir,
		"--idempotency-key", "k", "--min-quorum", "1", "--target-nresults", "1", "--fixed-credit", "5")
	m := batchLine.FindStringSubmatch(out)
	if m == nil || m[2] != "run1" || m[3] != "3" {
		t.Fatalf("batch submit output = %q, want \"batch <id> run1 3 jobs\"", out)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	wu, err := b.st.WorkunitGetByName(ctx, "run1_b.txt")
	if err != nil || wu.Batch != id || wu.FixedCredit != 5 || wu.MinQuorum != 1 {
		t.Fatalf("job run1_b.txt = %+v, %v; want in batch %d with fixed credit 5", wu, err, id)
	}
	// The same submission again: nothing new.
	out2, errOut, err := b.run(t, "batch", "submit", "--app", "demo", "--name", "run1", "--input-dir", dir,
		"--idempotency-key", "k", "--min-quorum", "1", "--target-nresults", "1")
	if err != nil || out2 != out || !strings.Contains(errOut, "nothing created") {
		t.Fatalf("repeated batch submit = %q, %q, %v; want the same batch and a note", out2, errOut, err)
	}
	in1 := filepath.Join(dir, "a.txt")
	m = batchLine.FindStringSubmatch(b.mustRun(t, "batch", "submit", "--app", "demo", "--name", "run2", "--input", in1,
		"--min-quorum", "1", "--target-nresults", "1"))
	if m == nil || m[3] != "1" {
		t.Fatalf("batch submit --input: %v", m)
	}
	for _, args := range [][]string{
		{"batch", "submit", "--app", "demo", "--name", "run3"},
		{"batch", "submit", "--app", "demo", "--name", "run3", "--input-dir", dir, "--input", in1},
		{"batch", "submit", "--app", "demo", "--name", "run1", "--input", in1},
		{"batch", "submit", "--app", "demo", "--name", "bad name", "--input", in1},
	} {
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("taskctl %s succeeded, want an error", strings.Join(args, " "))
		}
	}
	if _, _, err := b.run(t, "batch", "submit", "--app", "nosuch", "--name", "x", "--input", in1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("batch submit for a missing app = %v, want ErrNotFound", err)
	}

	// Hold one job, finish another and assimilate it with an output file.
	jobs, _ := b.st.WorkunitListByBatch(ctx, id, 0, 10)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET hold_reason = ? WHERE id = ?`, state.ErrTooManyErrorResults, jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = 1, assimilate_state = ? WHERE id = ?`,
		state.AssimilateDone, jobs[1].ID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b.projectDir, "results", jobs[1].Name, "out"), "output b")

	status := b.mustRun(t, "batch", "status", "run1")
	for _, want := range []string{"batch " + m2s(id) + " run1 (app demo) in_progress", "jobs 3: done 1, pending 1, held 1"} {
		if !strings.Contains(status, want) {
			t.Errorf("batch status lacks %q:\n%s", want, status)
		}
	}
	var st batch.Status
	if err := json.Unmarshal([]byte(b.mustRun(t, "batch", "status", "--json", m2s(id))), &st); err != nil ||
		st.Counts != (batch.Counts{Jobs: 3, Done: 1, Pending: 1, Held: 1, Assimilated: 1}) {
		t.Fatalf("batch status --json = %+v, %v", st, err)
	}
	if _, _, err := b.run(t, "batch", "status", m2s(id), "--json"); err == nil || !strings.Contains(err.Error(), "flags go before") {
		t.Errorf("batch status with a flag after the id = %v, want a hint to put flags first", err)
	}
	if _, _, err := b.run(t, "batch", "status", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("batch status of a missing batch = %v, want ErrNotFound", err)
	}
	list := b.mustRun(t, "batch", "list")
	if !strings.Contains(list, "run1") || !strings.Contains(list, "run2") {
		t.Errorf("batch list = %q", list)
	}
	var ls []batch.Status
	if err := json.Unmarshal([]byte(b.mustRun(t, "batch", "list", "--json", "--state", "in_progress")), &ls); err != nil || len(ls) != 2 {
		t.Fatalf("batch list --json = %+v, %v", ls, err)
	}

	// Outputs, as a folder and as a tar.
	dest := filepath.Join(b.projectDir, "collected")
	b.mustRun(t, "batch", "outputs", "--dest", dest, "run1")
	if got, err := os.ReadFile(filepath.Join(dest, "run1_b.txt", "out")); err != nil || string(got) != "output b" {
		t.Fatalf("collected output = %q, %v", got, err)
	}
	tarPath := filepath.Join(b.projectDir, "run1.tar.gz")
	b.mustRun(t, "batch", "outputs", "--tar", tarPath, "run1")
	if names := tarNames(t, tarPath); strings.Join(names, ",") != "run1/run1_b.txt/out" {
		t.Fatalf("tar entries = %v", names)
	}
	if _, _, err := b.run(t, "batch", "outputs", "run1"); err == nil {
		t.Error("batch outputs without --dest or --tar succeeded, want an error")
	}

	// Requeue: by job, by batch, by reason.
	b.mustRun(t, "job", "requeue", jobs[0].Name)
	if wu, _ := b.st.WorkunitGet(ctx, jobs[0].ID); wu.HoldReason != 0 || wu.MaxErrorResults != 6 {
		t.Fatalf("job after requeue = %+v", wu)
	}
	if _, _, err := b.run(t, "job", "requeue", jobs[0].Name); !errors.Is(err, batch.ErrNotCancellable) {
		t.Fatalf("requeue of a job not held = %v, want ErrNotCancellable", err)
	}
	hold := func() {
		if _, err := b.st.DB().Exec(`UPDATE workunit SET hold_reason = ? WHERE id = ?`, state.ErrTooManyTotalResults, jobs[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	hold()
	if out := b.mustRun(t, "batch", "requeue", "--reason", "too_many_error_results", "run1"); !strings.HasPrefix(out, "requeued 0 jobs") {
		t.Fatalf("batch requeue for another reason = %q, want 0 jobs", out)
	}
	if out := b.mustRun(t, "batch", "requeue", "run1"); !strings.HasPrefix(out, "requeued 1 jobs") {
		t.Fatalf("batch requeue = %q, want 1 job", out)
	}
	hold()
	if out := b.mustRun(t, "job", "requeue", "--reason", "too_many_total_results"); out != "requeued 1 jobs held for too_many_total_results\n" {
		t.Fatalf("job requeue --reason = %q", out)
	}
	for _, args := range [][]string{
		{"job", "requeue"},
		{"job", "requeue", "--reason", "too_many_total_results", "x"},
		{"job", "requeue", "x", "--reason", "too_many_total_results"},
		{"job", "requeue", "--reason", "bogus"},
	} {
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("taskctl %s succeeded, want an error", strings.Join(args, " "))
		}
	}

	// Cancel one job, then the batch.
	if out := b.mustRun(t, "job", "cancel", jobs[2].Name); !strings.HasPrefix(out, "cancelled job") {
		t.Fatalf("job cancel = %q", out)
	}
	if _, _, err := b.run(t, "job", "cancel", jobs[1].Name); !errors.Is(err, batch.ErrNotCancellable) {
		t.Fatalf("cancel of a done job = %v, want ErrNotCancellable", err)
	}
	if _, _, err := b.run(t, "job", "cancel", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel of a missing job = %v, want ErrNotFound", err)
	}
	if out := b.mustRun(t, "batch", "cancel", "run1"); out != "cancelled batch "+m2s(id)+" run1: 1 jobs stopped\n" {
		t.Fatalf("batch cancel = %q", out)
	}
	if bt, _ := b.st.BatchGet(ctx, id); bt.State != row.BatchCancelled || bt.CancelTime != b.now.Unix() {
		t.Fatalf("batch after cancel = %+v", bt)
	}
}

func m2s(n int64) string { return strconv.FormatInt(n, 10) }

func tarNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return names
}
