package filedeleter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

const (
	orphanAge   = 24 * time.Hour
	orphanEvery = time.Hour
)

// sweeper returns a file deleter of b's store and directories with the
// orphan sweep on, closed at the end of t, and its registry.
func (b *bundle) sweeper(t *testing.T, age time.Duration) (*filedeleter.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc := newService(t, filedeleter.Config{DownloadDir: b.download, UploadDir: b.upload, Fanout: fan,
		Mod: b.mod, ModIndex: b.modIndex, Batch: b.max, OrphanAge: age, OrphanEvery: orphanEvery, UploadGrace: b.grace},
		filedeleter.Deps{Store: b.st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: filedeleter.NewMetrics(reg), Now: func() time.Time { return b.now }})
	t.Cleanup(func() { svc.Close() })
	return svc, reg
}

// put writes a file at rel under dir, last changed age before b.now, with
// mode perm (0444: a finished upload; 0644: one in transfer), and returns
// its path.
func (b *bundle) put(t *testing.T, dir, rel string, age time.Duration, perm fs.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("bytes of "+rel), perm); err != nil {
		t.Fatal(err)
	}
	mt := b.now.Add(-age)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
	return path
}

// putUpload stores an upload named name where the data server would.
func (b *bundle) putUpload(t *testing.T, name string, age time.Duration, perm fs.FileMode) string {
	t.Helper()
	return b.put(t, b.upload, fanout.Dir(name, fan)+"/"+name, age, perm)
}

// counterWith returns the value of counter name with label = value.
func counterWith(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
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
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

func TestOrphanSweepDeletesOnlyOldUploadsNoResultNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := 2 * orphanAge

	// Late uploads of results whose rows are gone: a finished one and one
	// left in transfer.
	gone := []string{b.putUpload(t, "purged_r0_0", old, 0o444), b.putUpload(t, "purged_r1_1", old, 0o644)}
	// As old as the age exactly: an orphan too.
	gone = append(gone, b.putUpload(t, "purged_r2_0", orphanAge, 0o444))

	var kept []string
	// Too young: its result's report may be on its way.
	kept = append(kept, b.putUpload(t, "recent_r0_0", orphanAge-time.Minute, 0o644))
	// Results whose rows exist, in every file_delete_state: the sweep keeps
	// even a file the row does not list (index 9), so the READY row's own
	// outputs (deleted by the row-driven pass) are not used here.
	wu, _ := b.job(t, "live", state.FileDeleteInit)
	for _, fds := range []state.FileDeleteState{state.FileDeleteInit, state.FileDeleteReady, state.FileDeleteDone, state.FileDeleteError} {
		name := "live_" + strconv.Itoa(int(fds))
		b.result(t, wu, name, fds)
		kept = append(kept, b.putUpload(t, name+"_9", old, 0o444))
		if fds != state.FileDeleteReady {
			kept = append(kept, b.putUpload(t, name+"_0", old, 0o444))
		}
	}
	// Names that are not <result>_<digits>.
	for _, name := range []string{"notes.txt", "trailing_", "_7", "digits_x1", "noindex"} {
		kept = append(kept, b.putUpload(t, name, old, 0o644))
	}
	// An orphan's name in a bucket it does not hash to.
	wrong := fmt.Sprintf("%x", (mustAtoi16(t, fanout.Dir("purged_r3_0", fan))+1)%fan)
	kept = append(kept, b.put(t, b.upload, wrong+"/purged_r3_0", old, 0o444))
	// Outside every bucket: at the top, in a bucket's sub-directory, and in
	// a directory that is no bucket name.
	kept = append(kept, b.put(t, b.upload, "purged_r4_0", old, 0o444),
		b.put(t, b.upload, fanout.Dir("purged_r5_0", fan)+"/sub/purged_r5_0", old, 0o444),
		b.put(t, b.upload, "archive/purged_r6_0", old, 0o444))
	svc, reg := b.sweeper(t, orphanAge)
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range gone {
		if exists(t, p) {
			t.Errorf("orphan %s was kept", p)
		}
	}
	for _, p := range kept {
		if !exists(t, p) {
			t.Errorf("%s was deleted", p)
		}
	}
	if got := counterSum(t, reg, "taskserver_file_deleter_orphans_deleted_total"); got != 3 {
		t.Errorf("orphans_deleted_total = %g, want 3", got)
	}
	// In buckets: 3 orphans, 1 young, 7 referenced, 5 bad names + the
	// wrong bucket + the sub-directory.
	for outcome, want := range map[string]float64{"orphan": 3, "young": 1, "referenced": 7, "unrecognised": 7} {
		if got := counterWith(t, reg, "taskserver_file_deleter_orphan_sweep_files_total", "outcome", outcome); got != want {
			t.Errorf("orphan_sweep_files_total{outcome=%q} = %g, want %g", outcome, got, want)
		}
	}
	if got := counterWith(t, reg, "taskserver_file_deleter_errors_total", "kind", "orphan"); got != 0 {
		t.Errorf("errors_total{kind=orphan} = %g, want 0", got)
	}
}

// Symbolic links are never followed: neither a link with an orphan's name
// in a bucket nor a bucket that is a link leads the sweep to what they
// point to, outside the upload directory; the links themselves stay too.
func TestOrphanSweepFollowsNoLinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := 2 * orphanAge
	outside := t.TempDir()
	victim := b.put(t, outside, "victim_0", old, 0o444)
	orphan := b.putUpload(t, "late_r0_0", old, 0o444) // the one file the sweep may delete
	used := fanout.Dir("late_r0_0", fan)
	link := filepath.Join(b.upload, used, "late_r1_0")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	// A bucket that is a link to a directory of old files with orphans'
	// names, whichever bucket they hash to.
	linked := fmt.Sprintf("%x", (mustAtoi16(t, used)+1)%fan)
	var targets []string
	for i := range 20 {
		targets = append(targets, b.put(t, outside, fmt.Sprintf("dir/late_r%d_0", 100+i), old, 0o444))
	}
	bucketLink := filepath.Join(b.upload, linked)
	if err := os.Symlink(filepath.Join(outside, "dir"), bucketLink); err != nil {
		t.Fatal(err)
	}

	svc, reg := b.sweeper(t, orphanAge)
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, orphan) {
		t.Error("the orphan beside the link was kept")
	}
	for _, p := range append(targets, victim) {
		if !exists(t, p) {
			t.Errorf("%s, outside the upload directory, was deleted through a link", p)
		}
	}
	for _, l := range []string{link, bucketLink} {
		if _, err := os.Lstat(l); err != nil {
			t.Errorf("symbolic link %s: %v; want it left alone", l, err)
		}
	}
	if got := counterWith(t, reg, "taskserver_file_deleter_orphan_sweep_files_total", "outcome", "unrecognised"); got != 1 {
		t.Errorf("orphan_sweep_files_total{outcome=unrecognised} = %g, want 1 (the link in a bucket)", got)
	}
}

func mustAtoi16(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.ParseInt(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// A round looks at orphanStep × batch entries per pass and reads on at the
// next pass; a new round starts only --orphan-every after the last one
// started. A deleter that stops mid-round (a crash) and a new one that
// starts over both finish without error and without touching live files.
func TestOrphanSweepStepsRoundsAndRestarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.max = 2 // 20 entries per pass
	old := 2 * orphanAge
	var orphans []string
	for i := range 30 {
		orphans = append(orphans, b.putUpload(t, fmt.Sprintf("late_r%d_0", i), old, 0o444))
	}
	wu, _ := b.job(t, "live", state.FileDeleteInit)
	b.result(t, wu, "live_r0", state.FileDeleteInit)
	live := b.putUpload(t, "live_r0_0", old, 0o444)
	left := func() int {
		n := 0
		for _, p := range orphans {
			if exists(t, p) {
				n++
			}
		}
		return n
	}

	first, firstReg := b.sweeper(t, orphanAge)
	if _, err := first.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	looked := counterSum(t, firstReg, "taskserver_file_deleter_orphan_sweep_files_total")
	if n := left(); looked != 20 || n < 10 {
		t.Fatalf("after one pass: looked at %g entries, %d of 30 orphans left; want 20 looked at, at least 10 left", looked, n)
	}
	// The first deleter stops here; a second starts a round of its own.
	second, secondReg := b.sweeper(t, orphanAge)
	for range 3 {
		if _, err := second.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := left(); n != 0 {
		t.Fatalf("%d orphans left after the restarted deleter's round", n)
	}
	// The first one, resumed, reads on over files deleted under it.
	for range 2 {
		if _, err := first.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !exists(t, live) {
		t.Fatal("a live result's file was deleted")
	}
	for _, reg := range []*prometheus.Registry{firstReg, secondReg} {
		if got := counterWith(t, reg, "taskserver_file_deleter_errors_total", "kind", "orphan"); got != 0 {
			t.Errorf("errors_total{kind=orphan} = %g, want 0", got)
		}
	}
	deleted := counterSum(t, firstReg, "taskserver_file_deleter_orphans_deleted_total") +
		counterSum(t, secondReg, "taskserver_file_deleter_orphans_deleted_total")
	if deleted != 30 {
		t.Errorf("orphans deleted by the two = %g, want 30 (each once)", deleted)
	}

	// The round is over: a new orphan waits for the next one.
	late := b.putUpload(t, "later_r0_0", old, 0o444)
	if _, err := second.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, late) {
		t.Fatal("an orphan was deleted before --orphan-every had passed since the last round started")
	}
	b.now = b.now.Add(orphanEvery)
	for range 2 {
		if _, err := second.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if exists(t, late) {
		t.Fatal("an orphan was kept after --orphan-every had passed")
	}
}

// With --mod above 1 only replica 0 sweeps, and --orphan-age 0 turns the
// sweep off.
func TestOrphanSweepRunsOnReplicaZeroOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orphan := b.putUpload(t, "late_r0_0", 2*orphanAge, 0o444)
	b.mod, b.modIndex = 2, 1
	other, reg := b.sweeper(t, orphanAge)
	off, _ := func() (*filedeleter.Service, *prometheus.Registry) {
		b.mod, b.modIndex = 1, 0
		defer func() { b.mod, b.modIndex = 2, 1 }()
		return b.sweeper(t, 0)
	}()
	for _, svc := range []*filedeleter.Service{other, off} {
		if _, err := svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !exists(t, orphan) {
		t.Fatal("replica 1 of 2, or a deleter with --orphan-age 0, deleted an orphan")
	}
	if got := counterSum(t, reg, "taskserver_file_deleter_orphan_sweep_files_total"); got != 0 {
		t.Fatalf("replica 1 looked at %g files, want 0", got)
	}
	b.modIndex = 0
	zero, _ := b.sweeper(t, orphanAge)
	if _, err := zero.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, orphan) {
		t.Fatal("replica 0 of 2 kept an orphan")
	}
}

// failingLookups is the store with the orphan sweep's lookup failing while
// fail is set, as when the database is unreachable.
type failingLookups struct {
	*store.Store
	fail bool
}

func (f *failingLookups) ResultNamesExisting(ctx context.Context, names []string) ([]string, error) {
	if f.fail {
		return nil, errors.New("database unreachable")
	}
	return f.Store.ResultNamesExisting(ctx, names)
}

// A failed lookup fails the pass (the loop backs off) and deletes nothing;
// the files it was about go to the next pass's lookup, not lost for the
// round.
func TestOrphanSweepLookupFailureDeletesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := 2 * orphanAge
	orphan := b.putUpload(t, "late_r0_0", old, 0o444)
	wu, _ := b.job(t, "live", state.FileDeleteInit)
	b.result(t, wu, "live_r0", state.FileDeleteInit)
	live := b.putUpload(t, "live_r0_0", old, 0o444)
	st := &failingLookups{Store: b.st, fail: true}
	svc := newService(t, filedeleter.Config{DownloadDir: b.download, UploadDir: b.upload, Fanout: fan,
		Mod: 1, Batch: b.max, OrphanAge: orphanAge, OrphanEvery: orphanEvery},
		filedeleter.Deps{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return b.now }})
	t.Cleanup(func() { svc.Close() })
	if _, err := svc.RunOnce(b.ctx); err == nil {
		t.Fatal("RunOnce with the lookup failing returned no error")
	}
	if !exists(t, orphan) || !exists(t, live) {
		t.Fatal("a file was deleted while its result could not be looked up")
	}
	st.fail = false
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, orphan) {
		t.Error("the orphan was kept after the lookup came back")
	}
	if !exists(t, live) {
		t.Error("a live result's file was deleted")
	}
}
