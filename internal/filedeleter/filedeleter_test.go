package filedeleter_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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

const fan = 8

type bundle struct {
	ctx                context.Context
	st                 *store.Store
	appID              int64
	download, upload   string
	now                time.Time
	reg                *prometheus.Registry
	creator            *jobs.Creator
	svc                *filedeleter.Service
	mod, modIndex, max int
	grace              time.Duration // the file deleter's UploadGrace
	sharedGrace        time.Duration // its SharedFileGrace
	// wrap, if set, wraps the store the service uses.
	wrap func(filedeleter.Store) filedeleter.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	dir := t.TempDir()
	b := &bundle{ctx: ctx, st: st, appID: appID, download: filepath.Join(dir, "download"),
		upload: filepath.Join(dir, "upload"), now: time.Unix(1_700_000_000, 0), mod: 1, max: 100}
	b.creator = jobs.NewCreator(st, b.download, fan, func() time.Time { return time.Unix(1, 0) })
	b.build(t)
	return b
}

func (b *bundle) build(t testing.TB) {
	t.Helper()
	b.reg = prometheus.NewRegistry()
	var st filedeleter.Store = b.st
	if b.wrap != nil {
		st = b.wrap(st)
	}
	b.svc = newService(t, filedeleter.Config{DownloadDir: b.download, UploadDir: b.upload, Fanout: fan,
		Mod: b.mod, ModIndex: b.modIndex, Batch: b.max, OrphanEvery: time.Hour, UploadGrace: b.grace,
		SharedFileGrace: b.sharedGrace},
		filedeleter.Deps{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: filedeleter.NewMetrics(b.reg), Now: func() time.Time { return b.now }})
}

// newService is filedeleter.New for a valid cfg.
func newService(t testing.TB, cfg filedeleter.Config, deps filedeleter.Deps) *filedeleter.Service {
	t.Helper()
	svc, err := filedeleter.New(cfg, deps)
	if err != nil {
		t.Fatalf("filedeleter.New(%+v): %v", cfg, err)
	}
	return svc
}

// job creates a job with a staged input file and file_delete_state fds; it
// returns the job and its input file's path.
func (b *bundle) job(t *testing.T, name string, fds state.FileDeleteState) (row.Workunit, string) {
	t.Helper()
	if err := b.creator.Create(b.ctx, b.appID, []jobs.Job{{Name: name, Inputs: []jobs.Input{{Data: []byte("input of " + name)}}}}, jobs.DefaultParams()); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
	wu, err := b.st.WorkunitGetByName(b.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET file_delete_state = ? WHERE id = ?`, fds, wu.ID); err != nil {
		t.Fatal(err)
	}
	path, _ := fanout.Path(b.download, jobs.InputName(name), fan)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("staged input of %s: %v", name, err)
	}
	return wu, path
}

// result creates an instance of wu with two output files, writing those
// listed in write, and returns its id and both output paths.
func (b *bundle) result(t *testing.T, wu row.Workunit, name string, fds state.FileDeleteState, write ...int) (int64, []string) {
	t.Helper()
	doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out", "log"}, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	id := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wu.ID, Name: name,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, XMLDocIn: doc, FileDeleteState: fds}).ID
	var paths []string
	for i := 0; i < 2; i++ {
		p, _ := fanout.Path(b.upload, jobxml.OutputName(name, i), fan)
		paths = append(paths, p)
	}
	for _, i := range write {
		if err := os.MkdirAll(filepath.Dir(paths[i]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths[i], []byte("output"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return id, paths
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func (b *bundle) wuState(t *testing.T, id int64) (state.FileDeleteState, int64) {
	t.Helper()
	wu, err := b.st.WorkunitGet(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return wu.FileDeleteState, wu.ModTime
}

func (b *bundle) resultState(t *testing.T, id int64) (state.FileDeleteState, int64) {
	t.Helper()
	r, err := b.st.ResultGet(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.FileDeleteState, r.ModTime
}

func TestDeletesExactlyTheMarkedFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ready, readyIn := b.job(t, "ready", state.FileDeleteReady)
	kept, keptIn := b.job(t, "kept", state.FileDeleteInit)
	r1, r1Out := b.result(t, ready, "ready_0", state.FileDeleteReady, 0, 1)
	r2, _ := b.result(t, ready, "ready_1", state.FileDeleteReady) // never uploaded
	r3, r3Out := b.result(t, kept, "kept_0", state.FileDeleteInit, 0, 1)

	n, err := b.svc.RunOnce(b.ctx)
	if err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3 rows (1 workunit, 2 results), no error", n, err)
	}
	for _, p := range append([]string{readyIn}, r1Out...) {
		if exists(t, p) {
			t.Errorf("file %s of a READY row still exists after RunOnce", p)
		}
	}
	for _, p := range append([]string{keptIn}, r3Out...) {
		if !exists(t, p) {
			t.Errorf("file %s of a row not marked READY was deleted", p)
		}
	}
	if fds, mt := b.wuState(t, ready.ID); fds != state.FileDeleteDone || mt != b.now.Unix() {
		t.Errorf("workunit ready: file_delete_state %v mod_time %d; want done, %d", fds, mt, b.now.Unix())
	}
	if fds, _ := b.wuState(t, kept.ID); fds != state.FileDeleteInit {
		t.Errorf("workunit kept: file_delete_state %v; want init", fds)
	}
	for _, id := range []int64{r1, r2} {
		if fds, mt := b.resultState(t, id); fds != state.FileDeleteDone || mt != b.now.Unix() {
			t.Errorf("result %d: file_delete_state %v mod_time %d; want done, %d", id, fds, mt, b.now.Unix())
		}
	}
	if fds, _ := b.resultState(t, r3); fds != state.FileDeleteInit {
		t.Errorf("result kept_0: file_delete_state %v; want init", fds)
	}
	if got := counterSum(t, b.reg, "taskserver_file_deleter_files_deleted_total"); got != 3 {
		t.Errorf("files_deleted_total = %g, want 3 (1 input + 2 outputs)", got)
	}
	if got := counterSum(t, b.reg, "taskserver_file_deleter_files_missing_total"); got != 2 {
		t.Errorf("files_missing_total = %g, want 2 (ready_1 never uploaded)", got)
	}
	if n, err := b.svc.RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want 0, nil", n, err)
	}
}

func TestMissingFilesAreFineAndCrashRerunIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wu, in := b.job(t, "gone", state.FileDeleteReady)
	// As if a previous run deleted the file and died before marking the row.
	if err := os.Remove(in); err != nil {
		t.Fatal(err)
	}
	if n, err := b.svc.RunOnce(b.ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1, nil", n, err)
	}
	if fds, _ := b.wuState(t, wu.ID); fds != state.FileDeleteDone {
		t.Fatalf("file_delete_state = %v after deleting an already missing file, want done", fds)
	}
}

func TestUndeletableFileMarksError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wu, _ := b.job(t, "stuck", state.FileDeleteReady)
	r, outs := b.result(t, wu, "stuck_0", state.FileDeleteReady, 1)
	// A non-empty directory where the output file should be cannot be
	// removed, whoever runs the test (root ignores permission bits).
	if err := os.MkdirAll(filepath.Join(outs[0], "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wu.ID, Name: "stuck_bad",
		ServerState: state.ServerOver, XMLDocIn: "<result><file_info><name>../../etc</name></file_info></result>",
		FileDeleteState: state.FileDeleteReady}).ID
	if n, err := b.svc.RunOnce(b.ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3, nil", n, err)
	}
	if fds, _ := b.resultState(t, r); fds != state.FileDeleteError {
		t.Errorf("result with an undeletable file: file_delete_state %v, want error", fds)
	}
	if exists(t, outs[1]) {
		t.Errorf("the deletable output %s of the same result was kept", outs[1])
	}
	if fds, _ := b.resultState(t, bad); fds != state.FileDeleteError {
		t.Errorf("result with a bad file name: file_delete_state %v, want error", fds)
	}
	if fds, _ := b.wuState(t, wu.ID); fds != state.FileDeleteDone {
		t.Errorf("workunit: file_delete_state %v, want done", fds)
	}
	if got := counterSum(t, b.reg, "taskserver_file_deleter_errors_total"); got != 2 {
		t.Errorf("errors_total = %g, want 2", got)
	}
	if n, err := b.svc.RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce after errors = %d, %v; want 0 (ERROR rows are left alone)", n, err)
	}
}

func TestModPartitionsRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	mine := 0
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		wu, _ := b.job(t, name, state.FileDeleteReady)
		ids = append(ids, wu.ID)
		if store.Partition(wu.ID, 2) == 1 {
			mine++
		}
	}
	if mine == 0 || mine == len(ids) {
		t.Fatalf("jobs %v all hash to one partition of 2: the test needs both", ids)
	}
	b.mod, b.modIndex, b.max = 2, 1, 1
	b.build(t)
	handled := 0
	for {
		n, err := b.svc.RunOnce(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		handled += n
	}
	for _, id := range ids {
		fds, _ := b.wuState(t, id)
		if want := map[bool]state.FileDeleteState{true: state.FileDeleteDone, false: state.FileDeleteReady}[store.Partition(id, 2) == 1]; fds != want {
			t.Errorf("workunit %d with --mod 2 --mod-index 1: file_delete_state %v, want %v", id, fds, want)
		}
	}
	if handled != mine {
		t.Errorf("rows handled = %d, want %d", handled, mine)
	}
}

// counterSum sums a counter family across its labels.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A row made READY behind the cursor (an operator retrying an ERROR row)
// is handled when the cursor reaches the end of the table and wraps.
func TestRowsBehindTheCursorComeRound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		wu, _ := b.job(t, name, state.FileDeleteReady)
		ids = append(ids, wu.ID)
	}
	b.max = 2
	b.build(t)
	if n, err := b.svc.RunOnce(b.ctx); err != nil || n != 2 {
		t.Fatalf("first RunOnce = %d, %v; want 2", n, err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET file_delete_state = ? WHERE id = ?`, state.FileDeleteReady, ids[0]); err != nil {
		t.Fatal(err)
	}
	// c and d; then e, the end of the table, and a again from the start.
	for i, want := range []int{2, 2, 0} {
		if n, err := b.svc.RunOnce(b.ctx); err != nil || n != want {
			t.Fatalf("RunOnce %d after a was made READY again = %d, %v; want %d", i+2, n, err, want)
		}
	}
	for _, id := range ids {
		if fds, _ := b.wuState(t, id); fds != state.FileDeleteDone {
			t.Errorf("workunit %d: file_delete_state %v, want done", id, fds)
		}
	}
}
