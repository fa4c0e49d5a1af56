package filedeleter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// withShared takes a file given to the job, a shared file "db" and a
// second given file gzip'd.
const withShared = `<input_template>
<file_info><number>0</number></file_info>
<file_info><physical_name>db</physical_name><sticky/></file_info>
<file_info><number>1</number><gzip/></file_info>
<workunit>
  <file_ref><open_name>in</open_name></file_ref>
  <file_ref><open_name>db</open_name></file_ref>
  <file_ref><open_name>params</open_name></file_ref>
</workunit>
</input_template>`

// path is where name+suffix is in the download directory: in name's
// fan-out directory.
func (b *bundle) path(t *testing.T, name, suffix string) string {
	t.Helper()
	p, err := fanout.Path(b.download, name, fan)
	if err != nil {
		t.Fatal(err)
	}
	return p + suffix
}

// stageDB stages the shared file "db" with a gzip'd copy at Unix time at.
func (b *bundle) stageDB(t *testing.T, at int64) row.SharedFile {
	t.Helper()
	c := jobs.NewCreator(b.st, b.download, fan, func() time.Time { return time.Unix(at, 0) })
	sf, err := c.StageShared(b.ctx, "db", []byte("the shared database"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(t, b.path(t, sf.Name, "")) || !exists(t, b.path(t, sf.Name, ".gz")) {
		t.Fatalf("shared file %s or its gzip'd copy not staged", sf.Name)
	}
	return sf
}

// sharedJob creates job name using the shared file "db", at Unix time at,
// with file_delete_state fds.
func (b *bundle) sharedJob(t *testing.T, name string, at int64, fds state.FileDeleteState) (row.Workunit, error) {
	t.Helper()
	c := jobs.NewCreator(b.st, b.download, fan, func() time.Time { return time.Unix(at, 0) })
	err := c.Create(b.ctx, b.appID, []jobs.Job{{Name: name, InputTemplate: withShared,
		Inputs: []jobs.Input{{Data: []byte("in of " + name)}, {Data: []byte("params of " + name)}}}}, jobs.DefaultParams())
	if err != nil {
		return row.Workunit{}, err
	}
	wu, err := b.st.WorkunitGetByName(b.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET file_delete_state = ? WHERE id = ?`, fds, wu.ID); err != nil {
		t.Fatal(err)
	}
	return wu, nil
}

func (b *bundle) shared(t *testing.T, name string) row.SharedFile {
	t.Helper()
	sf, err := b.st.SharedFileGet(b.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return sf
}

// TestJobInputsDeletedWithGzipCopiesNotShared: a finished job's own inputs
// are deleted, each with its gzip'd copy beside it; the shared file it used
// is not (it is the shared-file pass's).
func TestJobInputsDeletedWithGzipCopiesNotShared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sharedGrace = 1000 * time.Hour // the shared-file pass keeps db
	b.build(t)
	sf := b.stageDB(t, b.now.Unix())
	wu, err := b.sharedJob(t, "job", b.now.Unix(), state.FileDeleteReady)
	if err != nil {
		t.Fatal(err)
	}
	in, params := jobs.InputName("job"), paramsName(t, b, wu)
	gone := []string{b.path(t, in, ""), b.path(t, params, ""), b.path(t, params, ".gz")}
	kept := []string{b.path(t, sf.Name, ""), b.path(t, sf.Name, ".gz")}
	for _, p := range append(gone, kept...) {
		if !exists(t, p) {
			t.Fatalf("%s not staged", p)
		}
	}
	if _, err := b.svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range gone {
		if exists(t, p) {
			t.Errorf("input %s of the finished job still exists", p)
		}
	}
	for _, p := range kept {
		if !exists(t, p) {
			t.Errorf("shared file %s was deleted with the job", p)
		}
	}
	if fds, _ := b.wuState(t, wu.ID); fds != state.FileDeleteDone {
		t.Errorf("job file_delete_state = %v, want done", fds)
	}
	if got := b.shared(t, sf.Name); got.State != row.SharedFileLive {
		t.Errorf("shared file state = %d, want live (within its grace)", got.State)
	}
}

// paramsName returns the physical name of job wu's gzip'd input (its
// third file).
func paramsName(t *testing.T, b *bundle, wu row.Workunit) string {
	t.Helper()
	w, err := b.st.WorkunitGet(b.ctx, wu.ID)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jobxml.ParseWorkunit(w.XMLDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range doc.Inputs {
		if in.GzippedNbytes > 0 && !in.NoDelete {
			return in.Name
		}
	}
	t.Fatalf("job %s has no gzip'd input of its own", wu.Name)
	return ""
}

// TestSharedFileKeptWhileAnUnfinishedJobRefersToIt: a shared file is
// deleted, with its gzip'd copy, only once every job referring to it has
// had its files deleted and its grace since the last reference is over.
func TestSharedFileKeptWhileAnUnfinishedJobRefersToIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sharedGrace = time.Hour
	b.build(t)
	t0 := b.now.Unix() - 2*3600 // staged and referred to two hours ago: past the grace
	sf := b.stageDB(t, t0)
	if _, err := b.sharedJob(t, "done", t0, state.FileDeleteDone); err != nil {
		t.Fatal(err)
	}
	running, err := b.sharedJob(t, "running", t0, state.FileDeleteInit)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{b.path(t, sf.Name, ""), b.path(t, sf.Name, ".gz")}
	check := func(when string, wantState int) {
		t.Helper()
		if _, err := b.svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got := b.shared(t, sf.Name); got.State != wantState {
			t.Errorf("%s: shared file state = %d, want %d", when, got.State, wantState)
		}
		for _, p := range files {
			if exists(t, p) != (wantState != row.SharedFileDeleted) {
				t.Errorf("%s: %s exists = %v, want %v", when, p, exists(t, p), wantState != row.SharedFileDeleted)
			}
		}
	}
	check("one job still running", row.SharedFileLive)
	// Its files still to be deleted: still needed.
	if _, err := b.st.DB().Exec(`UPDATE workunit SET file_delete_state = ? WHERE id = ?`, state.FileDeleteReady, running.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DB().Exec(`UPDATE shared_file SET last_ref_time = ? WHERE id = ?`, b.now.Unix()-60, sf.ID); err != nil {
		t.Fatal(err)
	}
	check("the last job's files deleted, but referred to a minute ago", row.SharedFileLive)
	b.now = b.now.Add(time.Hour)
	check("the grace over", row.SharedFileDeleted)
	if got := counterValue(t, b.reg, "taskserver_file_deleter_files_deleted_total", "kind", "shared"); got != 2 {
		t.Errorf(`files_deleted_total{kind="shared"} = %g, want 2 (the file and its gzip'd copy)`, got)
	}
	// A job may not refer to it any more; staging it again brings it back.
	if _, err := b.sharedJob(t, "late", b.now.Unix(), state.FileDeleteInit); err == nil {
		t.Error("a job referring to a deleted shared file was created")
	}
	b.stageDB(t, b.now.Unix())
	if got := b.shared(t, sf.Name); got.State != row.SharedFileLive {
		t.Errorf("shared file staged again: state %d, want live", got.State)
	}
}

// racingStore runs before, once, at the start of the pass's
// SharedFileMarkDeleting, and after once it returned.
type racingStore struct {
	filedeleter.Store
	before, after func()
}

func (s *racingStore) SharedFileMarkDeleting(ctx context.Context, p store.SharedFileDeleteParams) (int64, error) {
	if f := s.before; f != nil {
		s.before = nil
		f()
	}
	n, err := s.Store.SharedFileMarkDeleting(ctx, p)
	if f := s.after; f != nil {
		s.after = nil
		f()
	}
	return n, err
}

// TestSharedFileReferredToDuringTheDeletePass: a job that refers to a shared
// file while the delete pass takes it either keeps it (its reference
// committed while the pass's statement waited) or is refused (the pass was
// first); a file is never deleted under a job.
func TestSharedFileReferredToDuringTheDeletePass(t *testing.T) {
	t.Parallel()
	t.Run("job first", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t0 := b.now.Unix() - 2*3600
		sf := b.stageDB(t, t0)
		// A job being submitted now: its transaction has referred to the
		// file (as package jobs does: the conditional update first) but
		// not committed when the pass starts.
		wu := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: b.now.Unix(), App: b.appID, Name: "new"})
		tx, err := b.st.DB().Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`UPDATE shared_file SET njobs = njobs + 1, last_ref_time = GREATEST(last_ref_time, ?) WHERE id = ? AND state = 0`,
			b.now.Unix(), sf.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO workunit_shared_file (shared_file_id, workunitid) VALUES (?, ?)`, sf.ID, wu.ID); err != nil {
			t.Fatal(err)
		}
		b.wrap = func(st filedeleter.Store) filedeleter.Store {
			return &racingStore{Store: st, before: func() {
				// The pass's statement waits for the row; commit meanwhile.
				go func() {
					time.Sleep(300 * time.Millisecond)
					if err := tx.Commit(); err != nil {
						t.Error(err)
					}
				}()
			}}
		}
		b.sharedGrace = time.Hour
		b.build(t)
		start := time.Now()
		if _, err := b.svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("the pass took %v: it did not wait for the job's transaction", d)
		}
		if got := b.shared(t, sf.Name); got.State != row.SharedFileLive || got.LastRefTime != b.now.Unix() {
			t.Errorf("shared file = state %d last_ref_time %d, want live, %d: the job's reference won", got.State,
				got.LastRefTime, b.now.Unix())
		}
		if !exists(t, b.path(t, sf.Name, "")) || !exists(t, b.path(t, sf.Name, ".gz")) {
			t.Error("the shared file was deleted under the job that refers to it")
		}
	})
	t.Run("pass first", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t0 := b.now.Unix() - 2*3600
		sf := b.stageDB(t, t0)
		// A job being submitted: it found the file live, and inserts its
		// rows (package jobs' one transaction) once the pass marked it.
		wu := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: b.now.Unix(), App: b.appID, Name: "template"})
		wu.ID, wu.Name = 0, "new"
		var submitErr error
		b.wrap = func(st filedeleter.Store) filedeleter.Store {
			return &racingStore{Store: st, after: func() {
				_, _, submitErr = b.st.BatchInsertWithJobs(b.ctx, store.BatchInsertParams{
					Batch: row.Batch{Name: "late", AppID: b.appID, CreateTime: b.now.Unix()}, Jobs: []row.Workunit{wu},
					Shared: store.SharedRefs{"new": {sf.ID}}})
			}}
		}
		b.sharedGrace = time.Hour
		b.build(t)
		if _, err := b.svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(submitErr, store.ErrSharedFileGone) {
			t.Errorf("job submitted while the file was being deleted: %v, want ErrSharedFileGone", submitErr)
		}
		if _, err := b.st.WorkunitGetByName(b.ctx, "new"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused job exists: %v", err)
		}
		if got := b.shared(t, sf.Name); got.State != row.SharedFileDeleted || exists(t, b.path(t, sf.Name, "")) {
			t.Errorf("shared file = state %d, want deleted and its file gone", got.State)
		}
	})
}

// counterValue returns the value of counter name with label label=value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
