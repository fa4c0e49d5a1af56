package jobs

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// InputOpenName is the name under which the application opens a job's input
// file (BOINC's <open_name>).
const InputOpenName = "in"

// ErrJobExists is returned when a job of that name is already in the
// database.
var ErrJobExists = errors.New("job already exists")

// Store is what job creation needs from the database.
type Store interface {
	AppGet(ctx context.Context, id int64) (row.App, error)
	BatchInsertWithJobs(ctx context.Context, p store.BatchInsertParams) (row.Batch, bool, error)
	KnownAnswerList(ctx context.Context, appID int64) ([]row.KnownAnswer, error)
	KnownAnswerListInputs(ctx context.Context, ids []int64) ([]row.KnownAnswer, error)
	WorkunitGetByName(ctx context.Context, name string) (row.Workunit, error)
	WorkunitInsertBatch(ctx context.Context, wus []row.Workunit) error
}

// Job is one job to create: its name and the content of its input file.
type Job struct {
	Name  string
	Input []byte
}

// MaxNameLen is the longest job name the workunit table stores.
const MaxNameLen = 254

// Creator stages input files and inserts jobs.
type Creator struct {
	st          Store
	downloadDir string
	fanout      int
	now         func() time.Time
}

// NewCreator returns a Creator staging files under downloadDir with the
// project's fan-out. now is the clock (time.Now in production).
func NewCreator(st Store, downloadDir string, fan int, now func() time.Time) *Creator {
	if now == nil {
		now = time.Now
	}
	return &Creator{st: st, downloadDir: downloadDir, fanout: fan, now: now}
}

// RemoveInputs deletes the input files Create staged for jobs whose
// insert did not commit, so a failed or interrupted batch leaves no file
// that no job refers to. Files already gone are fine.
func (c *Creator) RemoveInputs(jobs []string) error {
	var errs []error
	for _, j := range jobs {
		path, err := fanout.Path(c.downloadDir, InputName(j), c.fanout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// InputName is the name of job's input file in the download directory
// (jobs of a batch add a random part; see CreateBatch).
func InputName(job string) string { return job + "_in" }

// NewName returns a fresh job name "<prefix>_<unix time>_<16 random hex>":
// unique without asking the database, and never reused, so a file left by a
// crashed batch can never be mistaken for a later job's.
func NewName(prefix string, now time.Time) string {
	return prefix + "_" + strconv.FormatInt(now.Unix(), 10) + "_" + randomHex(8)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Create is CreateForApp for app appID, read from the database.
func (c *Creator) Create(ctx context.Context, appID int64, batch []Job, p Params) error {
	app, err := c.st.AppGet(ctx, appID)
	if err != nil {
		return err
	}
	return c.CreateForApp(ctx, app, batch, p)
}

// CreateForApp stages the input file of every job and then inserts all
// their workunits in one transaction, with transition_time = now so the
// transitioner creates their instances. The app's policies shape the rows
// (see Params.workunit), and known-answer jobs are mixed in (see mix). On
// error no job of the batch is in the database (files may be left; see the
// package comment).
func (c *Creator) CreateForApp(ctx context.Context, app row.App, batch []Job, p Params) error {
	if len(batch) == 0 {
		return p.check()
	}
	wus, extra, err := c.prepare(ctx, app, batch, p, "")
	if err != nil {
		return err
	}
	return c.st.WorkunitInsertBatch(ctx, append(wus, extra...))
}

// CreateBatch creates batch b of app with its jobs, all in one transaction:
// a retried submission never finds half a batch. It returns the stored batch
// and true; or, if the submitter's idempotency key was used already, that
// earlier batch and false, having created nothing. The input files of a
// batch's jobs carry a random part in their names, so a submission that
// loses a race for the batch name (and fails on it) cannot overwrite the
// files of the one that won.
func (c *Creator) CreateBatch(ctx context.Context, app row.App, b row.Batch, batch []Job, p Params) (row.Batch, bool, error) {
	if err := p.check(); err != nil {
		return row.Batch{}, false, err
	}
	wus, extra, err := c.prepare(ctx, app, batch, p, randomHex(4))
	if err != nil {
		return row.Batch{}, false, err
	}
	b.AppID = app.ID
	if b.CreateTime == 0 {
		b.CreateTime = c.now().Unix()
	}
	return c.st.BatchInsertWithJobs(ctx, store.BatchInsertParams{Batch: b, Jobs: wus, Extra: extra})
}

// Submit creates one job named name after checking that no job of that name
// exists: without the check, staging would replace the input file of the
// existing job before the insert failed on the unique name.
func (c *Creator) Submit(ctx context.Context, app row.App, job Job, p Params) error {
	_, err := c.st.WorkunitGetByName(ctx, job.Name)
	switch {
	case err == nil:
		return fmt.Errorf("job %q: %w", job.Name, ErrJobExists)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	return c.CreateForApp(ctx, app, []Job{job}, p)
}

// staged is a job whose input file is to be staged under file.
type staged struct {
	job           Job
	file          string
	knownAnswerID int64
}

// prepare checks every job, picks the known-answer jobs to mix in, stages
// all input files and syncs their directories, and returns the workunit rows
// of the jobs and of the known-answer jobs. Nothing is staged unless every
// job is valid. salt, if not empty, goes into the input file names.
func (c *Creator) prepare(ctx context.Context, app row.App, batch []Job, p Params, salt string) ([]row.Workunit, []row.Workunit, error) {
	if err := p.check(); err != nil {
		return nil, nil, err
	}
	seen := make(map[string]bool, len(batch))
	todo := make([]staged, 0, len(batch))
	for _, j := range batch {
		file := inputFile(j.Name, salt)
		if err := checkName(j.Name, file); err != nil {
			return nil, nil, err
		}
		if seen[j.Name] {
			return nil, nil, fmt.Errorf("job %q: named twice", j.Name)
		}
		seen[j.Name] = true
		todo = append(todo, staged{job: j, file: file})
	}
	kas, err := c.mix(ctx, app, len(batch))
	if err != nil {
		return nil, nil, err
	}
	for _, ka := range kas {
		name := knownAnswerName(batch[mrand.IntN(len(batch))].Name)
		if checkName(name, inputFile(name, salt)) != nil {
			name = randomHex(8) // the twin's name was near the length limit
		}
		todo = append(todo, staged{job: Job{Name: name, Input: ka.Input}, file: inputFile(name, salt), knownAnswerID: ka.ID})
	}

	now := c.now().Unix()
	wus := make([]row.Workunit, 0, len(batch))
	var extra []row.Workunit
	files := newStager(c.downloadDir, c.fanout)
	for _, s := range todo {
		in := jobxml.InputFile{Name: s.file, OpenName: InputOpenName, Nbytes: float64(len(s.job.Input)), MD5: md5Hex(s.job.Input), CopyFile: true}
		doc, err := jobxml.FormatWorkunit(jobxml.Workunit{Inputs: []jobxml.InputFile{in}})
		if err != nil {
			return nil, nil, fmt.Errorf("job %q: %w", s.job.Name, err)
		}
		if err := files.write(in.Name, s.job.Input); err != nil {
			return nil, nil, fmt.Errorf("job %q: %w", s.job.Name, err)
		}
		wu := p.workunit(app, s.job.Name, doc, now, s.knownAnswerID)
		if s.knownAnswerID != 0 {
			extra = append(extra, wu)
		} else {
			wus = append(wus, wu)
		}
	}
	// The files must be durable before any row refers to them: a row must
	// never outlive its file in a crash.
	if err := files.sync(); err != nil {
		return nil, nil, err
	}
	return wus, extra, nil
}

// inputFile is the name of job's input file, with salt (see CreateBatch)
// if not empty.
func inputFile(job, salt string) string {
	if salt == "" {
		return InputName(job)
	}
	return InputName(job + "_" + salt)
}

// knownAnswerName names a known-answer job after twin, a job created with
// it: twin's name up to its last "_", then 16 random hex digits. A host
// must not tell a known-answer job from the others (a cheater would compute
// those honestly and fake the rest), so nothing it is sent may mark one:
// the known answer is recorded only in workunit.known_answer_id. For the
// work generator's names (NewName: "<prefix>_<unix time>_<16 hex>") the
// result has exactly their shape, the same prefix and time; names a
// submitter chose are imitated only as far as their last "_".
func knownAnswerName(twin string) string {
	prefix := ""
	if i := strings.LastIndexByte(twin, '_'); i >= 0 {
		prefix = twin[:i+1]
	}
	return prefix + randomHex(8)
}

// checkName refuses a job name the database or the download directory
// cannot hold.
func checkName(job, file string) error {
	if len(job) > MaxNameLen {
		return fmt.Errorf("job name %q: longer than %d bytes", job, MaxNameLen)
	}
	if err := fanout.ValidName(job); err != nil {
		return fmt.Errorf("job name: %w", err)
	}
	if err := fanout.ValidName(file); err != nil {
		return fmt.Errorf("job %q input file: %w", job, err)
	}
	return nil
}

// mix picks the known-answer jobs to add to n new jobs of app: for each job,
// with probability app.KnownAnswerFraction, a random known answer of the app
// (so some may repeat). It returns them with their inputs; none when the app
// has no known answers.
func (c *Creator) mix(ctx context.Context, app row.App, n int) ([]row.KnownAnswer, error) {
	if app.KnownAnswerFraction <= 0 || n == 0 {
		return nil, nil
	}
	list, err := c.st.KnownAnswerList(ctx, app.ID)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	var picked []int64
	for range n {
		if mrand.Float64() < app.KnownAnswerFraction {
			picked = append(picked, list[mrand.IntN(len(list))].ID)
		}
	}
	if len(picked) == 0 {
		return nil, nil
	}
	distinct := slices.Compact(slices.Sorted(slices.Values(picked)))
	inputs, err := c.st.KnownAnswerListInputs(ctx, distinct)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]row.KnownAnswer, len(inputs))
	for _, ka := range inputs {
		byID[ka.ID] = ka
	}
	out := make([]row.KnownAnswer, 0, len(picked))
	for _, id := range picked {
		// One deleted between the two reads is simply not mixed in.
		if ka, ok := byID[id]; ok {
			out = append(out, ka)
		}
	}
	return out, nil
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}
