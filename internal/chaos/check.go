package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// progress is a snapshot of the run.
type progress struct {
	live, unsent, inProgress, over, purged, created, handled int
}

func (g progress) String() string {
	return fmt.Sprintf("jobs live %d, purged %d | instances unsent %d, in progress %d, over %d | handler calls %d",
		g.live, g.purged, g.unsent, g.inProgress, g.over, g.handled)
}

// progress counts the live rows, the purged jobs in the archives and the
// handler calls.
func (p *project) progress(ctx context.Context) (progress, error) {
	g, err := p.liveProgress(ctx)
	if err != nil {
		return g, err
	}
	wus, _, _ := projectrun.ReadArchives(filepath.Join(p.dir, "archives"), true)
	names := map[string]bool{}
	for _, w := range wus {
		names[w["name"]] = true
	}
	g.purged = len(names)
	g.created = g.live + g.purged
	if b, err := os.ReadFile(p.handledLog); err == nil {
		g.handled = bytes.Count(b, []byte("\n"))
	}
	return g, nil
}

// liveProgress counts only the live rows: cheap enough to ask every
// second however long the run (the archives grow with it).
func (p *project) liveProgress(ctx context.Context) (progress, error) {
	c, err := projectrun.CountLive(ctx, p.st.DB())
	return progress{live: c.Jobs, unsent: c.Unsent, inProgress: c.InProgress, over: c.Over}, err
}

var (
	wuCols     = []string{"id", "name", "error_mask", "assimilate_state"}
	resultCols = []string{"id", "name", "workunitid", "userid", "hostid", "server_state", "outcome", "validate_state",
		"received_time", "granted_credit", "file_delete_state"}
	creditCols = []string{"id", "total_credit"}
)

// Result outcomes and states the checks read (BOINC's numbers).
const (
	assimilateDone   = 2
	validateValid    = 1
	outcomeSuccess   = 1
	outcomeClientErr = 3
)

// check joins the database, the archives, the handled log, the ack logs
// and the folders after everything stopped, and counts broken promises.
func (p *project) check(ctx context.Context) (*Report, error) {
	r := &Report{Faults: map[string]int{}}
	note := func(format string, args ...any) {
		if len(r.Notes) < 50 {
			r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
		}
	}
	liveWU, err := projectrun.LiveRecords(ctx, p.st.DB(), "workunit", wuCols)
	if err != nil {
		return nil, err
	}
	liveRes, err := projectrun.LiveRecords(ctx, p.st.DB(), "result", resultCols)
	if err != nil {
		return nil, err
	}
	users, err := projectrun.LiveRecords(ctx, p.st.DB(), "user", creditCols)
	if err != nil {
		return nil, err
	}
	hosts, err := projectrun.LiveRecords(ctx, p.st.DB(), "host", creditCols)
	if err != nil {
		return nil, err
	}
	arcWU, arcRes, err := projectrun.ReadArchives(filepath.Join(p.dir, "archives"), false)
	if err != nil {
		return nil, err
	}
	handled, err := readHandled(p.handledLog)
	if err != nil {
		return nil, err
	}

	// Jobs: each handed to the project with one outcome, matching its row.
	jobs, twice := jobsByName(arcWU, liveWU)
	for _, name := range twice {
		note("job %s is in the archives or the database under two ids", name)
		r.DuplicateAssimilations++
	}
	r.Jobs = len(jobs)
	for name, w := range jobs {
		ds := handled.done[name]
		r.HandlerCalls += len(ds)
		distinct := map[delivery]bool{}
		for _, d := range ds {
			distinct[d] = true
		}
		switch {
		case len(ds) == 0:
			r.JobsLost++
			note("job %s (assimilate_state %d, error_mask %d) never reached the handler", name, w.Int("assimilate_state"), w.Int("error_mask"))
			continue
		case len(distinct) > 1:
			r.DuplicateAssimilations++
			note("job %s handed over with %d different outcomes", name, len(distinct))
		}
		if w.Int("assimilate_state") != assimilateDone {
			r.JobsLost++
			note("job %s handled but its row is not marked assimilated", name)
		}
		d := ds[len(ds)-1]
		if d.mask != w.Int("error_mask") {
			r.JobsLost++
			note("job %s handed over with error mask %d, its row has %d", name, d.mask, w.Int("error_mask"))
		}
		if d.mask == 0 {
			// Record hashes the outputs in order: "out", then "log".
			h := sha256.New()
			h.Write(demoapp.Output(name))
			h.Write(demoapp.Log(demoapp.GeneratedFiles(name), demoapp.Rounds))
			if d.digest != hex.EncodeToString(h.Sum(nil)) {
				r.WrongOutputs++
				note("job %s: the assimilated output is not the correct one", name)
			}
			r.JobsAssimilated++
		} else {
			r.JobsErrored++
		}
	}
	for name := range handled.done {
		if _, ok := jobs[name]; !ok {
			r.JobsLost++
			note("handler got job %s that is in neither the database nor the archives", name)
		}
	}
	for name, n := range handled.missing {
		r.FilesDeletedEarly += n
		note("job %s: the handler found an output gone %d time(s)", name, n)
	}
	r.HandlerRedeliveries = r.HandlerCalls - (r.JobsAssimilated + r.JobsErrored)

	// Instances: one per user per job; credit only for valid ones, and the
	// totals the sums of what was granted.
	results := map[string]projectrun.Record{}
	for _, res := range append(arcRes, liveRes...) {
		results[res["name"]] = res
	}
	r.Instances = len(results)
	perUser := map[[2]int64]int{}
	userSum, hostSum := map[int64]float64{}, map[int64]float64{}
	for _, res := range results {
		if u := res.Int("userid"); u != 0 {
			perUser[[2]int64{res.Int("workunitid"), u}]++
		}
		c := res.Float("granted_credit")
		if c != 0 && res.Int("validate_state") != validateValid {
			r.DuplicateCredit++
			note("result %s got %.3f credit but is not valid (validate_state %d)", res["name"], c, res.Int("validate_state"))
		}
		userSum[res.Int("userid")] += c
		hostSum[res.Int("hostid")] += c
	}
	for k, n := range perUser {
		if n > 1 {
			r.SameUserTwice++
			note("user %d got %d instances of job %d", k[1], n, k[0])
		}
	}
	for _, tc := range []struct {
		what string
		rows []projectrun.Record
		sums map[int64]float64
	}{{"user", users, userSum}, {"host", hosts, hostSum}} {
		for _, row := range tc.rows {
			got, want := row.Float("total_credit"), tc.sums[row.Int("id")]
			if math.Abs(got-want) > 1e-6*math.Max(1, want) {
				r.DuplicateCredit++
				note("%s %d: total_credit %.3f, its results' granted credit sums to %.3f", tc.what, row.Int("id"), got, want)
			}
		}
	}

	// Reports: every result the server acknowledged is recorded as over.
	for _, path := range p.ackLogs {
		if err := p.checkAcks(path, results, r, note); err != nil {
			return nil, err
		}
	}

	// Files: nothing left in download or upload once every job is gone
	// (a live job's files are its own), and no live result waiting for a
	// deletion that never came.
	liveJobs := len(liveWU)
	// The live shared files (the demo model) stay for the file deleter's
	// --shared-file-grace after their last job: not leaked.
	kept, err := projectrun.SharedFilesKept(ctx, p.st.DB())
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"download", "upload"} {
		all, err := outputfile.ListLeft(filepath.Join(p.dir, d), time.Now(), ballastName)
		if err != nil {
			return nil, err
		}
		left := projectrun.Unkept(all, kept)
		if liveJobs == 0 {
			r.FilesLeaked += len(left)
			if len(left) > 0 {
				note("%d files left in %s after every job was purged: %q", len(left), d, left[:min(len(left), 10)])
			}
		}
		r.FilesLeft += len(left)
	}

	// The status page's counts, kept by triggers through every kill and
	// fault, against the rows.
	off, err := p.st.CountsRecount(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range off {
		note("%s", m)
	}
	r.CountsOff = len(off)
	return r, nil
}

// jobsByName merges the archived and the live workunit rows, later rows
// winning, and returns the names that appear under more than one id. The
// same row (same id) in both, or archived twice, is no duplicate: db_purge
// archives before it deletes, and a purge cut off by a crash or a lost
// database archives the same rows again in a later pass.
func jobsByName(archived, live []projectrun.Record) (jobs map[string]projectrun.Record, twice []string) {
	jobs = map[string]projectrun.Record{}
	for _, w := range append(append([]projectrun.Record(nil), archived...), live...) {
		if old, ok := jobs[w["name"]]; ok && old["id"] != w["id"] {
			twice = append(twice, w["name"])
		}
		jobs[w["name"]] = w
	}
	return jobs, twice
}

// checkAcks reads one host process's acknowledgement log ("<result>
// <host kind> <success|error> <on_time|late>") and counts the acknowledged
// reports the database does not hold as reported.
func (p *project) checkAcks(path string, results map[string]projectrun.Record, r *Report, note func(string, ...any)) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := map[string]bool{}
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || seen[fs[0]] {
			continue
		}
		seen[fs[0]] = true
		r.AckedReports++
		res, ok := results[fs[0]]
		switch {
		case !ok:
			r.ReportsLost++
			note("result %s acknowledged (%s) but in neither the database nor the archives", fs[0], filepath.Base(path))
		case res.Int("received_time") == 0:
			r.ReportsLost++
			note("result %s acknowledged (%s) but never recorded as received (server_state %d, outcome %d)",
				fs[0], filepath.Base(path), res.Int("server_state"), res.Int("outcome"))
		default:
			want := int64(outcomeSuccess)
			if fs[2] == "error" {
				want = outcomeClientErr
			}
			if res.Int("outcome") != want {
				r.AckedOutcomeDiffers++
			}
		}
	}
	return sc.Err()
}
