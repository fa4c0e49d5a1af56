package assimilator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// noLink fails as a link across file systems does, forcing the copy.
func noLink(oldname, newname string) error {
	return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EXDEV}
}

// fileHandler returns the bundle's FileHandler; with copyOnly it can never
// link.
func (b *bundle) fileHandler(copyOnly bool) *FileHandler {
	h := &FileHandler{Dir: b.results, UploadDir: b.upload, Fanout: fanoutN}
	if copyOnly {
		h.link = noLink
	}
	return h
}

// uploadPath is where output i of instance rname was uploaded.
func (b *bundle) uploadPath(t *testing.T, rname string, i int) string {
	t.Helper()
	path, err := fanout.Path(b.upload, jobxml.OutputName(rname, i), fanoutN)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// sameFile says whether the results entry name is the uploaded file path.
func (b *bundle) sameFile(t *testing.T, name, path string) bool {
	t.Helper()
	ri, err := os.Stat(filepath.Join(b.results, name))
	if err != nil {
		t.Fatal(err)
	}
	ui, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(ri, ui)
}

// wantFiles checks the results directory holds exactly want, name → bytes:
// nothing partial, nothing temporary.
func (b *bundle) wantFiles(t *testing.T, want map[string]string) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
	})
	if got := b.files(t); !slices.Equal(got, names) {
		t.Fatalf("results dir = %v, want %v", got, names)
	}
	for n, body := range want {
		if strings.HasSuffix(n, "/") {
			continue // an empty directory
		}
		if got := b.read(t, n); got != body {
			t.Errorf("results/%s = %q, want %q", n, got, body)
		}
		fi, err := os.Stat(filepath.Join(b.results, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("results/%s mode %v, want readable by all", n, fi.Mode())
		}
	}
}

func TestOutputsAreHardLinkedWhereTheyCanBe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	single := b.addJob(t, "single", 0, []byte("digest 42\n"))
	multi := b.addJob(t, "multi", 0, []byte("zero"), []byte("one"))
	failed := b.addJob(t, "failed", state.ErrCancelled)
	runOnce(t, b.serviceWith(b.fileHandler(false), b.st, Config{}))
	for _, id := range []int64{single, multi, failed} {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("job %d = %v, want done", id, st)
		}
	}
	b.wantFiles(t, map[string]string{"single/out": "digest 42\n", "multi/out": "zero", "multi/out1": "one",
		"failed.error": "cancelled\n"})
	for name, path := range map[string]string{"single/out": b.uploadPath(t, "single_0", 0),
		"multi/out": b.uploadPath(t, "multi_0", 0), "multi/out1": b.uploadPath(t, "multi_0", 1)} {
		if !b.sameFile(t, name, path) {
			t.Errorf("results/%s is not a hard link to %s", name, path)
		}
	}
	// The file deleter unlinks the uploads later; the results keep the data.
	if err := os.Remove(b.uploadPath(t, "single_0", 0)); err != nil {
		t.Fatal(err)
	}
	if got := b.read(t, "single/out"); got != "digest 42\n" {
		t.Errorf("results/single/out after its upload was deleted = %q", got)
	}
}

func TestOutputsAreCopiedWhereLinkingFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := []int64{b.addJob(t, "single", 0, []byte("digest 42\n")), b.addJob(t, "multi", 0, []byte("zero"), []byte("one")),
		b.addJob(t, "empty", 0), b.addJob(t, "failed", state.ErrCancelled)}
	// A job whose instance lists no output files gets an empty directory.
	doc, err := jobxml.FormatResult(storetest.Outputs("empty_0", nil, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	rid := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: t0, Job: ids[2], Name: "empty_0",
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid, XMLDocIn: doc}).ID
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ?, error_mask = 0 WHERE id = ?`, rid, ids[2]); err != nil {
		t.Fatal(err)
	}
	runOnce(t, b.serviceWith(b.fileHandler(true), b.st, Config{}))
	for _, id := range ids {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("job %d = %v, want done", id, st)
		}
	}
	b.wantFiles(t, map[string]string{"single/out": "digest 42\n", "multi/out": "zero", "multi/out1": "one", "empty/": "",
		"failed.error": "cancelled\n"})
	if b.sameFile(t, "single/out", b.uploadPath(t, "single_0", 0)) {
		t.Error("results/single/out is the upload file, want a copy when linking fails")
	}
}

func TestLinkReplacesAStaleResultFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.addJob(t, "job", 0, []byte("new"))
	if err := os.MkdirAll(filepath.Join(b.results, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.results, "job", "out"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	runOnce(t, b.serviceWith(b.fileHandler(false), b.st, Config{}))
	if st := b.state(t, id); st != state.AssimilateDone {
		t.Errorf("job = %v, want done", st)
	}
	b.wantFiles(t, map[string]string{"job/out": "new"})
	if !b.sameFile(t, "job/out", b.uploadPath(t, "job_0", 0)) {
		t.Error("results/job/out is not the upload file")
	}
}

// crashingHandler is a Flusher whose handler ran but which "crashes" at
// Flush: it returns an error without flushing, as if the process died
// between the page's handlers and its Flush.
type crashingHandler struct{ *FileHandler }

func (crashingHandler) Flush(context.Context) error { return errors.New("killed before flush") }

func TestCrashBeforeFlushLeavesJobsReadyAndARerunIsHarmless(t *testing.T) {
	t.Parallel()
	for _, copyOnly := range []bool{false, true} {
		name := map[bool]string{false: "link", true: "copy"}[copyOnly]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := []int64{b.addJob(t, "a", 0, []byte("alpha")), b.addJob(t, "b", 0, []byte("beta"), []byte("gamma")),
				b.addJob(t, "c", state.ErrTooManyErrorResults)}
			runOnce(t, b.serviceWith(crashingHandler{b.fileHandler(copyOnly)}, b.st, Config{}))
			for _, id := range ids {
				if st := b.state(t, id); st != state.AssimilateReady {
					t.Errorf("job %d after a crash before Flush = %v, want still ready", id, st)
				}
			}
			// The restarted process handles the jobs again, from scratch.
			runOnce(t, b.serviceWith(b.fileHandler(copyOnly), b.st, Config{}))
			for _, id := range ids {
				if st := b.state(t, id); st != state.AssimilateDone {
					t.Errorf("job %d after the rerun = %v, want done", id, st)
				}
			}
			b.wantFiles(t, map[string]string{"a/out": "alpha", "b/out": "beta", "b/out1": "gamma",
				"c.error": "too_many_error_results\n"})
		})
	}
}

// countingFlusher counts Flush calls and fails them while fail is set.
type countingFlusher struct {
	Handler
	mu    sync.Mutex
	fail  bool
	calls int
}

func (h *countingFlusher) Flush(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.fail {
		return errors.New("disk gone")
	}
	if f, ok := h.Handler.(Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

func TestFlushFailureMarksNothingTheHandlerTook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := []int64{b.addJob(t, "a", 0, []byte("alpha")), b.addJob(t, "b", state.ErrCancelled)}
	ka := b.addJob(t, "ka", 0, []byte("known"))
	if _, err := b.st.DB().Exec(`UPDATE workunit SET known_answer_id = 9 WHERE id = ?`, ka); err != nil {
		t.Fatal(err)
	}
	h := &countingFlusher{Handler: b.fileHandler(false), fail: true}
	s := b.serviceWith(h, b.st, Config{})
	if n, err := s.RunOnce(context.Background()); n != 3 || err != nil {
		t.Fatalf("RunOnce with Flush failing = %d, %v; want 3 tried, no pass error", n, err)
	}
	if h.calls != 1 {
		t.Errorf("Flush calls for one page = %d, want 1", h.calls)
	}
	for _, id := range ids {
		if st := b.state(t, id); st != state.AssimilateReady {
			t.Errorf("job %d after a failed Flush = %v, want still ready", id, st)
		}
	}
	if st := b.state(t, ka); st != state.AssimilateDone {
		t.Errorf("known-answer job = %v, want done: the handler never had it", st)
	}
	if got := testutil.ToFloat64(b.m.handlerErrors.WithLabelValues(failHandler)); got != 2 {
		t.Errorf(`handler_errors_total{kind="handler"} = %v, want 2`, got)
	}
	h.mu.Lock()
	h.fail = false
	h.mu.Unlock()
	b.advance(RetryMin)
	runOnce(t, s)
	for _, id := range ids {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("job %d after a Flush that worked = %v, want done", id, st)
		}
	}
	b.wantFiles(t, map[string]string{"a/out": "alpha", "b.error": "cancelled\n"})
}

func TestFileHandlerFlushFailureLeavesNoTemporaryFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := []int64{b.addJob(t, "a", 0, []byte("alpha")), b.addJob(t, "b", 0, []byte("beta"))}
	// A directory where b's file goes: the copy's rename, in Flush, fails.
	blocker := filepath.Join(b.results, "b", "out", "x")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	s := b.serviceWith(b.fileHandler(true), b.st, Config{})
	runOnce(t, s)
	for _, id := range ids {
		if st := b.state(t, id); st != state.AssimilateReady {
			t.Errorf("job %d after a failed Flush = %v, want still ready", id, st)
		}
	}
	if got := b.files(t); !slices.Equal(got, []string{"a/out", "b/out/x/"}) {
		t.Errorf("results dir after a failed Flush = %v, want [a/out b/out/x/]: a whole, b the blocker, no temporary files", got)
	}
	if err := os.RemoveAll(filepath.Join(b.results, "b", "out")); err != nil {
		t.Fatal(err)
	}
	b.advance(RetryMin)
	runOnce(t, s)
	for _, id := range ids {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("job %d after the retry = %v, want done", id, st)
		}
	}
	b.wantFiles(t, map[string]string{"a/out": "alpha", "b/out": "beta"})
}

func TestFileHandlerCreatesTheResultsDirectory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.results = filepath.Join(b.results, "deep", "er")
	id := b.addJob(t, "a", 0, []byte("alpha"))
	runOnce(t, b.serviceWith(b.fileHandler(false), b.st, Config{}))
	if st := b.state(t, id); st != state.AssimilateDone {
		t.Errorf("job = %v, want done", st)
	}
	b.wantFiles(t, map[string]string{"a/out": "alpha"})
}

// TestWritableOutputIsNotPublished: an output an upload may still write to
// is never published, linked or copied: a link would let a later upload
// change the published result, and a copy could be of a part. The job
// waits (its handling fails) for an operator to look.
func TestWritableOutputIsNotPublished(t *testing.T) {
	t.Parallel()
	for _, copyOnly := range []bool{false, true} {
		b := setup(t)
		id := b.addJob(t, "single", 0, []byte("digest 42\n"))
		if err := os.Chmod(b.uploadPath(t, "single_0", 0), outputfile.WritingMode); err != nil {
			t.Fatal(err)
		}
		runOnce(t, b.serviceWith(b.fileHandler(copyOnly), b.st, Config{}))
		if st := b.state(t, id); st == state.AssimilateDone {
			t.Errorf("copy only %v: job with a writable output assimilated", copyOnly)
		}
		b.wantFiles(t, map[string]string{})
	}
}
