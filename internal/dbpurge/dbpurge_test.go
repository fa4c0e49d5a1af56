package dbpurge_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

type bundle struct {
	ctx   context.Context
	st    *store.Store
	appID int64
	dir   string
	now   time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	return &bundle{ctx: ctx, st: st, appID: appID, dir: filepath.Join(t.TempDir(), "archives"), now: time.Unix(1_700_000_000, 0)}
}

func (b *bundle) service(t *testing.T, st dbpurge.Store, cfg dbpurge.Config) *dbpurge.Service {
	t.Helper()
	if st == nil {
		st = b.st
	}
	cfg.ArchiveDir = b.dir
	if cfg.MaxArchiveRows == 0 {
		cfg.MaxArchiveRows = 10000
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.Mod == 0 {
		cfg.Mod = 1
	}
	svc, err := dbpurge.New(cfg, dbpurge.Deps{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: dbpurge.NewMetrics(prometheus.NewRegistry()), Now: func() time.Time { return b.now }})
	if err != nil {
		t.Fatalf("dbpurge.New: %v", err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return svc
}

type res struct {
	server state.ServerState
	fds    state.FileDeleteState
}

var (
	overDone  = res{state.ServerOver, state.FileDeleteDone}
	overInit  = res{state.ServerOver, state.FileDeleteInit}
	overReady = res{state.ServerOver, state.FileDeleteReady}
	overError = res{state.ServerOver, state.FileDeleteError}
	inProg    = res{state.ServerInProgress, state.FileDeleteInit}
)

// job inserts a job with the given file_delete_state and mod_time, a
// reference to shared file 1, and its instances (one workunit_user row
// each); it returns the job's id.
func (b *bundle) job(t *testing.T, name string, fds state.FileDeleteState, modTime int64, results ...res) int64 {
	t.Helper()
	id := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: 1, App: b.appID, Name: name,
		XMLDoc:          `<workunit><file_info><name>` + name + `_in</name></file_info></workunit>`,
		FileDeleteState: fds, ModTime: modTime, RscFpopsEst: 1.5e12, MinQuorum: 2, TargetNResults: 2,
		AssimilateState: state.AssimilateDone, CanonicalResultID: 7}).ID
	if _, err := b.st.DB().Exec(`INSERT INTO workunit_shared_file (shared_file_id, workunitid) VALUES (1, ?)`, id); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		rname := name + "_" + strconv.Itoa(i)
		rid := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: id, Name: rname,
			ServerState: r.server, Outcome: state.OutcomeSuccess, FileDeleteState: r.fds,
			StderrOut: "<stderr_txt>a < b & \"c\"\n</stderr_txt>", CPUTime: 12.25, User: int64(100 + i)}).ID
		if _, err := b.st.DB().Exec(`INSERT INTO workunit_user (workunitid, userid, resultid) VALUES (?, ?, ?)`,
			id, 100+i, rid); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.DB().Get(&n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// rowsLeft reports how many workunit, result and workunit_user rows job id
// still has, and whether its reference to a shared file is left (1).
func (b *bundle) rowsLeft(t *testing.T, id int64) [3]int {
	left := [3]int{
		b.count(t, `SELECT COUNT(*) FROM workunit WHERE id = ?`, id),
		b.count(t, `SELECT COUNT(*) FROM result WHERE workunitid = ?`, id),
		b.count(t, `SELECT COUNT(*) FROM workunit_user WHERE workunitid = ?`, id),
	}
	// The shared-file reference goes with the job, and only with it.
	if refs := b.count(t, `SELECT COUNT(*) FROM workunit_shared_file WHERE workunitid = ?`, id); refs != left[0] {
		t.Errorf("job %d: %d workunit rows, %d shared file references", id, left[0], refs)
	}
	return left
}

// archived reads every archive file of prefix, in name order.
func (b *bundle) archived(t *testing.T, prefix string) (files []string, recs [][]dbpurge.Record) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(b.dir, prefix+"_*.xml.gz"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	re := regexp.MustCompile(`^` + prefix + `_[0-9]+_[0-9]+\.xml\.gz$`)
	for _, p := range paths {
		if !re.MatchString(filepath.Base(p)) {
			t.Errorf("archive file name %s does not match %s", filepath.Base(p), re)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := dbpurge.ReadArchive(f)
		f.Close()
		if err != nil {
			t.Fatalf("ReadArchive(%s): %v", p, err)
		}
		files = append(files, p)
		recs = append(recs, r)
	}
	return files, recs
}

func flatten(recs [][]dbpurge.Record) []dbpurge.Record {
	var out []dbpurge.Record
	for _, r := range recs {
		out = append(out, r...)
	}
	return out
}

func TestArchivesThenDeletesFinishedJobsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.now.Add(-2 * time.Hour).Unix()
	young := b.now.Add(-30 * time.Minute).Unix()
	purge1 := b.job(t, "purge1", state.FileDeleteDone, old, overDone, overDone)
	purge2 := b.job(t, "purge2", state.FileDeleteDone, old, overDone, overInit) // an instance never needed
	purge3 := b.job(t, "purge3", state.FileDeleteDone, old)                     // no instances at all
	keep := map[string]int64{
		"files not deleted":        b.job(t, "keep_ready", state.FileDeleteReady, old, overDone),
		"job never finished":       b.job(t, "keep_init", state.FileDeleteInit, old, inProg),
		"instance files pending":   b.job(t, "keep_res_ready", state.FileDeleteDone, old, overDone, overReady),
		"instance files in error":  b.job(t, "keep_res_error", state.FileDeleteDone, old, overError),
		"instance still in flight": b.job(t, "keep_inprog", state.FileDeleteDone, old, overDone, inProg),
		"younger than min-age":     b.job(t, "keep_young", state.FileDeleteDone, young, overDone),
		"job files in error":       b.job(t, "keep_wu_error", state.FileDeleteError, old, overDone),
	}
	svc := b.service(t, nil, dbpurge.Config{MinAge: time.Hour})

	n, err := svc.RunOnce(b.ctx)
	if err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3 jobs purged", n, err)
	}
	for _, id := range []int64{purge1, purge2, purge3} {
		if left := b.rowsLeft(t, id); left != [3]int{} {
			t.Errorf("job %d after purge: workunit/result/workunit_user rows left = %v, want none (nor its shared file reference)", id, left)
		}
	}
	for why, id := range keep {
		if left := b.rowsLeft(t, id); left[0] != 1 || left[1] == 0 || left[1] != left[2] {
			t.Errorf("job kept because %s: rows left = %v, want the job and all its instances", why, left)
		}
	}

	_, wuFiles := b.archived(t, "wu_archive")
	wus := flatten(wuFiles)
	if len(wus) != 3 {
		t.Fatalf("workunit records archived = %d, want 3", len(wus))
	}
	byName := map[string]dbpurge.Record{}
	for _, r := range wus {
		byName[r.Columns["name"]] = r
	}
	w := byName["purge1"]
	if w.Table != "workunit" || w.Columns["id"] != strconv.FormatInt(purge1, 10) ||
		w.Columns["xml_doc"] != `<workunit><file_info><name>purge1_in</name></file_info></workunit>` ||
		w.Columns["rsc_fpops_est"] != "1.5e+12" || w.Columns["file_delete_state"] != "2" ||
		w.Columns["canonical_resultid"] != "7" || w.Columns["need_validate"] != "0" || len(w.Columns) != 34 {
		t.Errorf("archived workunit purge1 = %+v; want its columns with their stored values", w)
	}
	_, resFiles := b.archived(t, "result_archive")
	results := flatten(resFiles)
	if len(results) != 4 {
		t.Fatalf("result records archived = %d, want 4", len(results))
	}
	for _, r := range results {
		if r.Table != "result" || r.Columns["stderr_out"] != "<stderr_txt>a < b & \"c\"\n</stderr_txt>" ||
			r.Columns["cpu_time"] != "12.25" || r.Columns["server_state"] != "5" || r.Columns["flops_estimate"] != "0" || len(r.Columns) != 33 {
			t.Errorf("archived result = %+v; want its columns with their stored values", r)
		}
		if wid := r.Columns["workunitid"]; wid != strconv.FormatInt(purge1, 10) && wid != strconv.FormatInt(purge2, 10) {
			t.Errorf("archived result of workunit %s, want only results of purged jobs", wid)
		}
	}
	if n, err := svc.RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want 0, nil", n, err)
	}
}

func TestArchiveFilesHoldAtMostMaxRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := 0; i < 5; i++ {
		ids = append(ids, b.job(t, "j"+strconv.Itoa(i), state.FileDeleteDone, 1, overDone))
	}
	svc := b.service(t, nil, dbpurge.Config{MaxArchiveRows: 2, Batch: 3})
	var counts []int
	for {
		n, err := svc.RunOnce(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		counts = append(counts, n)
	}
	if len(counts) != 2 || counts[0] != 3 || counts[1] != 2 {
		t.Fatalf("RunOnce counts = %v, want [3 2]", counts)
	}
	for _, prefix := range []string{"wu_archive", "result_archive"} {
		files, recs := b.archived(t, prefix)
		if len(files) != 3 {
			t.Errorf("%s files = %d, want 3 (5 rows, 2 per file)", prefix, len(files))
		}
		seen := map[string]bool{}
		for i, r := range recs {
			if len(r) > 2 {
				t.Errorf("%s holds %d rows, want at most 2", files[i], len(r))
			}
			for _, rec := range r {
				seen[rec.Columns["id"]] = true
			}
		}
		if len(seen) != 5 {
			t.Errorf("%s: %d distinct rows archived, want 5", prefix, len(seen))
		}
	}
}

// TestBatchArchivedInChunksAcrossFiles purges 230 jobs of three instances
// in one pass: their instances are listed and archived a chunk of jobs at
// a time, into files of at most 200 rows, and every row is archived once
// and deleted.
func TestBatchArchivedInChunksAcrossFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 230
	for i := 0; i < jobs; i++ {
		b.job(t, "j"+strconv.Itoa(i), state.FileDeleteDone, 1, overDone, overDone, overDone)
	}
	svc := b.service(t, nil, dbpurge.Config{MaxArchiveRows: 200, Batch: 500})
	if n, err := svc.RunOnce(b.ctx); err != nil || n != jobs {
		t.Fatalf("RunOnce = %d, %v; want %d jobs in one pass", n, err, jobs)
	}
	if left := b.count(t, `SELECT COUNT(*) FROM result`) + b.count(t, `SELECT COUNT(*) FROM workunit`); left != 0 {
		t.Errorf("%d rows left after the pass", left)
	}
	for _, c := range []struct {
		prefix      string
		rows, files int
	}{{"wu_archive", jobs, 2}, {"result_archive", 3 * jobs, 4}} {
		files, recs := b.archived(t, c.prefix)
		if len(files) != c.files {
			t.Errorf("%s: %d files, want %d (%d rows, 200 per file)", c.prefix, len(files), c.files, c.rows)
		}
		seen := map[string]int{}
		for i, r := range recs {
			if len(r) > 200 {
				t.Errorf("%s holds %d rows, want at most 200", files[i], len(r))
			}
			for _, rec := range r {
				seen[rec.Columns["id"]]++
			}
		}
		if len(seen) != c.rows {
			t.Errorf("%s: %d distinct rows archived, want %d", c.prefix, len(seen), c.rows)
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s: row %s archived %d times, want once", c.prefix, id, n)
			}
		}
	}
}

// failingPurge fails the delete once, as a crash between archive and delete
// would.
type failingPurge struct {
	*store.Store
	failed bool
}

func (f *failingPurge) WorkunitPurge(ctx context.Context, p store.PurgeParams) (store.PurgeCounts, error) {
	if !f.failed {
		f.failed = true
		return store.PurgeCounts{}, errors.New("connection lost")
	}
	return f.Store.WorkunitPurge(ctx, p)
}

func TestDeleteFailureArchivesTwiceNeverLoses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.job(t, "once", state.FileDeleteDone, 1, overDone)
	svc := b.service(t, &failingPurge{Store: b.st}, dbpurge.Config{})
	if _, err := svc.RunOnce(b.ctx); err == nil {
		t.Fatal("RunOnce with a failing delete succeeded, want its error")
	}
	if left := b.rowsLeft(t, id); left != [3]int{1, 1, 1} {
		t.Fatalf("rows after failed delete = %v, want all kept", left)
	}
	if n, err := svc.RunOnce(b.ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce after failure = %d, %v; want 1, nil", n, err)
	}
	if left := b.rowsLeft(t, id); left != [3]int{} {
		t.Fatalf("rows after purge = %v, want none", left)
	}
	_, recs := b.archived(t, "wu_archive")
	if got := flatten(recs); len(got) != 2 || got[0].Columns["name"] != "once" || got[1].Columns["name"] != "once" {
		t.Fatalf("archived workunits = %+v, want job once twice", got)
	}
}

func TestPurgeRefusesRowsOtherThanArchived(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.job(t, "j", state.FileDeleteDone, 1, overDone, overDone)
	_, err := b.st.WorkunitPurge(b.ctx, store.PurgeParams{WorkunitIDs: []int64{id}, Results: b.archivedResults(t, id)[:1]})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitPurge with 1 of 2 results archived = %v, want ErrConflict", err)
	}
	if left := b.rowsLeft(t, id); left != [3]int{1, 2, 2} {
		t.Fatalf("rows after refused purge = %v, want all kept", left)
	}
	ready := b.job(t, "r", state.FileDeleteReady, 1)
	if _, err := b.st.WorkunitPurge(b.ctx, store.PurgeParams{WorkunitIDs: []int64{ready}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitPurge of a READY job = %v, want ErrConflict", err)
	}
}

func TestModPartitionsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	mine := 0
	for i := 0; i < 8; i++ {
		id := b.job(t, "m"+strconv.Itoa(i), state.FileDeleteDone, 1, overDone)
		ids = append(ids, id)
		if store.Partition(id, 2) == 0 {
			mine++
		}
	}
	if mine == 0 || mine == len(ids) {
		t.Fatalf("jobs %v all hash to one partition of 2: the test needs both", ids)
	}
	svc := b.service(t, nil, dbpurge.Config{Mod: 2, ModIndex: 0})
	if n, err := svc.RunOnce(b.ctx); err != nil || n != mine {
		t.Fatalf("RunOnce --mod 2 --mod-index 0 = %d, %v; want %d", n, err, mine)
	}
	for _, id := range ids {
		if gone := b.rowsLeft(t, id)[0] == 0; gone != (store.Partition(id, 2) == 0) {
			t.Errorf("job %d purged = %v with --mod 2 --mod-index 0", id, gone)
		}
	}
}

func TestReadArchiveReportsTornMember(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.job(t, "a", state.FileDeleteDone, 1)
	svc := b.service(t, nil, dbpurge.Config{Batch: 1})
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	files, _ := b.archived(t, "wu_archive")
	whole, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// A second member cut short, as a crash mid-write leaves it.
	torn := append(append([]byte{}, whole...), whole[:len(whole)/2]...)
	recs, err := dbpurge.ReadArchive(bytes.NewReader(torn))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(recs) != 1 || recs[0].Columns["name"] != "a" {
		t.Fatalf("ReadArchive(torn) = %+v, %v; want the whole record and ErrUnexpectedEOF", recs, err)
	}
}

// A job behind the cursor that becomes purgeable later (here: old enough)
// is purged when the cursor reaches the end of the table and wraps.
func TestJobsBehindTheCursorComeRound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	young := b.job(t, "young", state.FileDeleteDone, b.now.Unix(), overDone)
	for i := 0; i < 4; i++ {
		b.job(t, "old"+strconv.Itoa(i), state.FileDeleteDone, 1, overDone)
	}
	svc := b.service(t, nil, dbpurge.Config{MinAge: time.Hour, Batch: 2})
	if n, err := svc.RunOnce(b.ctx); err != nil || n != 2 {
		t.Fatalf("first RunOnce = %d, %v; want 2", n, err)
	}
	b.now = b.now.Add(2 * time.Hour)
	for i, want := range []int{2, 1, 0} {
		if n, err := svc.RunOnce(b.ctx); err != nil || n != want {
			t.Fatalf("RunOnce %d = %d, %v; want %d", i+2, n, err, want)
		}
	}
	if left := b.rowsLeft(t, young); left != [3]int{} {
		t.Fatalf("job young after it came of age: rows left = %v, want none", left)
	}
}

// archivedResults is what a purge of job id would have archived of its
// instances, read now.
func (b *bundle) archivedResults(t *testing.T, id int64) []store.PurgedResult {
	t.Helper()
	rs, err := b.st.ResultListByWorkunitIDs(b.ctx, []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]store.PurgedResult, len(rs))
	for i, r := range rs {
		out[i] = store.PurgedResultOf(r)
	}
	return out
}

// lateReportBeforeDelete records a late report of instance resultID, as the
// scheduler's commit writes it, after the pass archived the instance and
// before it deletes it.
type lateReportBeforeDelete struct {
	*store.Store
	resultID int64
}

func (l *lateReportBeforeDelete) WorkunitPurge(ctx context.Context, p store.PurgeParams) (store.PurgeCounts, error) {
	if _, err := l.DB().ExecContext(ctx, `UPDATE result SET outcome = ?, received_time = ?, file_delete_state = ?
WHERE id = ?`, int(state.OutcomeSuccess), 1_700_000_000, int(state.FileDeleteReady), l.resultID); err != nil {
		return store.PurgeCounts{}, err
	}
	return l.Store.WorkunitPurge(ctx, p)
}

// TestLateReportBetweenArchiveAndDeleteIsKept: a host's late report that
// the scheduler records (and acks) while db_purge has archived the
// instance but not yet deleted it keeps the job: the purge refuses rows
// that changed since the archive, and the job is not purgeable again until
// the file deleter has dealt with the output just reported. Deleting the
// row with its older copy in the archive would lose an acked report.
func TestLateReportBetweenArchiveAndDeleteIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.job(t, "late", state.FileDeleteDone, 1, overDone, overDone)
	if _, err := b.st.DB().Exec(`UPDATE result SET outcome = ?, received_time = 0 WHERE name = 'late_1'`,
		int(state.OutcomeNoReply)); err != nil {
		t.Fatal(err)
	}
	var rid int64
	if err := b.st.DB().Get(&rid, `SELECT id FROM result WHERE name = 'late_1'`); err != nil {
		t.Fatal(err)
	}
	svc := b.service(t, &lateReportBeforeDelete{Store: b.st, resultID: rid}, dbpurge.Config{})
	if _, err := svc.RunOnce(b.ctx); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RunOnce with a report recorded after the archive = %v, want ErrConflict", err)
	}
	if left := b.rowsLeft(t, id); left != [3]int{1, 2, 2} {
		t.Fatalf("rows after the refused purge = %v, want all kept", left)
	}
	if got := b.count(t, `SELECT COUNT(*) FROM result WHERE id = ? AND received_time > 0`, rid); got != 1 {
		t.Fatal("the late report is not in the database")
	}
	// Not purgeable while the reported output waits for the file deleter.
	if n, err := b.service(t, nil, dbpurge.Config{}).RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce after the late report = %d, %v; want 0, nil", n, err)
	}
}

// TestPurgeRefusesAChangedInstance: an instance that changed in any column
// the purge compares, since it was archived, stops the purge.
func TestPurgeRefusesAChangedInstance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.job(t, "chg", state.FileDeleteDone, 1, overDone, overInit)
	archived := b.archivedResults(t, id)
	for _, set := range []string{"mod_time = mod_time + 1", "received_time = received_time + 1",
		"outcome = outcome + 1", "validate_state = validate_state + 1"} {
		if _, err := b.st.DB().Exec(`UPDATE result SET `+set+` WHERE id = ?`, archived[1].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.WorkunitPurge(b.ctx, store.PurgeParams{WorkunitIDs: []int64{id}, Results: archived}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("WorkunitPurge after %s = %v, want ErrConflict", set, err)
		}
		archived = b.archivedResults(t, id)
	}
	if left := b.rowsLeft(t, id); left != [3]int{1, 2, 2} {
		t.Fatalf("rows after refused purges = %v, want all kept", left)
	}
	if c, err := b.st.WorkunitPurge(b.ctx, store.PurgeParams{WorkunitIDs: []int64{id}, Results: archived}); err != nil || c.Results != 2 {
		t.Fatalf("WorkunitPurge of the rows as they are = %+v, %v; want 2 results deleted", c, err)
	}
}
