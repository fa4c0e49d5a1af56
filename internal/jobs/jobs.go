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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// ErrJobExists is returned when a job of that name is already in the
// database.
var ErrJobExists = errors.New("job already exists")

// Store is what job creation needs from the database.
type Store interface {
	AppGet(ctx context.Context, id int64) (row.App, error)
	BatchInsertWithJobs(ctx context.Context, p store.BatchInsertParams) (row.Batch, bool, error)
	JobTemplateGet(ctx context.Context, id int64) (row.JobTemplate, error)
	JobTemplatePut(ctx context.Context, kind, body string, now int64) (int64, error)
	SharedFileGet(ctx context.Context, name string) (row.SharedFile, error)
	SharedFileLatest(ctx context.Context, prefix string) (row.SharedFile, error)
	SharedFileRegister(ctx context.Context, f row.SharedFile) (row.SharedFile, error)
	KnownAnswerList(ctx context.Context, appID int64) ([]row.KnownAnswer, error)
	KnownAnswerListInputs(ctx context.Context, ids []int64) ([]row.KnownAnswer, error)
	WorkunitGetByName(ctx context.Context, name string) (row.Workunit, error)
	WorkunitInsertBatch(ctx context.Context, wus []row.Workunit, refs store.SharedRefs) error
}

// Job is one job to create: BOINC's create_work arguments.
type Job struct {
	Name string
	// Inputs are the files given to the job, one per file of its input
	// template that the template does not name itself, in order.
	Inputs []Input
	// CommandLine, if not empty, replaces the input template's.
	CommandLine string
	// InputTemplate and OutputTemplate are the job's own templates in
	// BOINC's format; empty means the app's (or the built-in ones).
	InputTemplate, OutputTemplate string
}

// Input is one file given to a job: at most one of its content (staged for
// this job; the default, so a zero Input is an empty file), a shared file
// staged before, or a file kept on another server.
type Input struct {
	// Data is the file's content.
	Data []byte
	// Shared names a shared file (see StageShared): its physical name, or
	// the name it was staged under, meaning the latest staged.
	Shared string
	// URL, MD5 and Nbytes describe a file on another server (BOINC's
	// remote file); its physical name is "jf_<md5>".
	URL    string
	MD5    string
	Nbytes float64
}

// MaxInputs bounds the files given to one job.
const MaxInputs = 64

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

// RemoveInputs deletes the input files (and gzip'd copies) Create staged
// for jobs whose insert did not commit, so a failed or interrupted batch
// leaves no file that no job refers to; with them the temporary files of
// a write a crash cut short. Files already gone are fine.
func (c *Creator) RemoveInputs(jobs []string) error {
	var errs []error
	for _, j := range jobs {
		for k := range MaxInputs {
			name := dataInputName(j, "", k)
			path, err := fanout.Path(c.downloadDir, name, c.fanout)
			if err != nil {
				errs = append(errs, err)
				break
			}
			dir := filepath.Dir(path)
			for _, p := range []string{path, path + ".gz", tempPath(dir, name), tempPath(dir, name+".gz")} {
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// InputName is the name of job's first input file in the download
// directory (jobs of a batch add a random part; see CreateBatch).
func InputName(job string) string { return job + "_in" }

// dataInputName is the name of the k-th file given to job with its
// content: job_in, job_in1, job_in2, ...; salt (see CreateBatch), if not
// empty, goes before "_in".
func dataInputName(job, salt string, k int) string {
	if salt != "" {
		job += "_" + salt
	}
	if k == 0 {
		return InputName(job)
	}
	return InputName(job) + strconv.Itoa(k)
}

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
	wus, extra, refs, err := c.prepare(ctx, app, batch, p, "")
	if err != nil {
		return err
	}
	return c.st.WorkunitInsertBatch(ctx, append(wus, extra...), refs)
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
	wus, extra, refs, err := c.prepare(ctx, app, batch, p, randomHex(4))
	if err != nil {
		return row.Batch{}, false, err
	}
	b.AppID = app.ID
	if b.CreateTime == 0 {
		b.CreateTime = c.now().Unix()
	}
	return c.st.BatchInsertWithJobs(ctx, store.BatchInsertParams{Batch: b, Jobs: wus, Extra: extra, Shared: refs})
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

// staged is a job to create and the known answer it copies, if any.
type staged struct {
	job           Job
	knownAnswerID int64
}

// prepare checks every job, picks the known-answer jobs to mix in, stages
// all input files and syncs their directories, and returns the workunit rows
// of the jobs and of the known-answer jobs, and the shared files they use. Nothing is staged unless every
// job is valid. salt, if not empty, goes into the input file names.
func (c *Creator) prepare(ctx context.Context, app row.App, batch []Job, p Params, salt string) ([]row.Workunit, []row.Workunit, store.SharedRefs, error) {
	if err := p.check(); err != nil {
		return nil, nil, nil, invalid(err)
	}
	seen := make(map[string]bool, len(batch))
	todo := make([]staged, 0, len(batch))
	for _, j := range batch {
		if err := checkName(j.Name, dataInputName(j.Name, salt, MaxInputs)); err != nil {
			return nil, nil, nil, invalid(err)
		}
		if seen[j.Name] {
			return nil, nil, nil, invalid(fmt.Errorf("job %q: named twice", j.Name))
		}
		seen[j.Name] = true
		todo = append(todo, staged{job: j})
	}
	kas, err := c.mix(ctx, app, len(batch))
	if err != nil {
		return nil, nil, nil, err
	}
	for _, ka := range kas {
		twin := batch[mrand.IntN(len(batch))]
		name := knownAnswerName(twin.Name)
		if checkName(name, dataInputName(name, salt, MaxInputs)) != nil {
			name = randomHex(8) // the twin's name was near the length limit
		}
		// The known answer's input replaces the twin's first file; the
		// others (shared files, a model) are the twin's.
		j := twin
		j.Name = name
		j.Inputs = append([]Input{{Data: ka.Input}}, twin.Inputs[min(1, len(twin.Inputs)):]...)
		todo = append(todo, staged{job: j, knownAnswerID: ka.ID})
	}

	now := c.now().Unix()
	t := newTemplates(c.st, app, now)
	type planned struct {
		s      staged
		tmpl   jobtemplate.Input
		outID  int64
		doc    jobxml.Workunit
		shared []int64
		stage  []stageFile
	}
	plans := make([]planned, 0, len(todo))
	for _, s := range todo {
		in, err := t.input(ctx, s.job.InputTemplate)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("job %q: %w", s.job.Name, err)
		}
		outID, err := t.output(ctx, s.job.OutputTemplate)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("job %q: %w", s.job.Name, err)
		}
		if err := p.withTemplate(in.Params).check(); err != nil {
			return nil, nil, nil, invalid(fmt.Errorf("job %q: with its input template's parameters: %w", s.job.Name, err))
		}
		files, shared, stage, err := c.resolve(ctx, t, s.job, in, salt)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("job %q: %w", s.job.Name, err)
		}
		doc, err := in.Workunit(files, s.job.CommandLine)
		if err != nil {
			return nil, nil, nil, invalid(fmt.Errorf("job %q: %w", s.job.Name, err))
		}
		plans = append(plans, planned{s: s, tmpl: in, outID: outID, doc: doc, shared: shared, stage: stage})
	}
	// Every job is valid: now stage.
	wus := make([]row.Workunit, 0, len(batch))
	var extra []row.Workunit
	refs := store.SharedRefs{}
	files := newStager(c.downloadDir, c.fanout)
	for _, pl := range plans {
		for _, f := range pl.stage {
			if err := files.write(f.name, f.data); err != nil {
				return nil, nil, nil, fmt.Errorf("job %q: %w", pl.s.job.Name, err)
			}
			if f.gzip != nil {
				if err := files.writeBeside(f.name, ".gz", f.gzip); err != nil {
					return nil, nil, nil, fmt.Errorf("job %q: %w", pl.s.job.Name, err)
				}
			}
		}
		docText, err := jobxml.FormatWorkunit(pl.doc)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("job %q: %w", pl.s.job.Name, err)
		}
		wu := p.withTemplate(pl.tmpl.Params).workunit(app, pl.s.job.Name, docText, now, pl.s.knownAnswerID)
		wu.OutputTemplateID = pl.outID
		if len(pl.shared) > 0 {
			refs[wu.Name] = pl.shared
		}
		if pl.s.knownAnswerID != 0 {
			extra = append(extra, wu)
		} else {
			wus = append(wus, wu)
		}
	}
	// The files must be durable before any row refers to them: a row must
	// never outlive its file in a crash.
	if err := files.sync(); err != nil {
		return nil, nil, nil, err
	}
	return wus, extra, refs, nil
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

// ErrInvalid marks an error in what was submitted (a bad name, template or
// input, a shared file not staged) rather than a failure of the server:
// errors.Is(err, ErrInvalid) tells callers to answer it as a bad request.
// The error's message is the problem's alone.
var ErrInvalid = errors.New("invalid job")

// invalidError is err marked as the submitter's.
type invalidError struct{ err error }

func (e invalidError) Error() string        { return e.err.Error() }
func (e invalidError) Unwrap() error        { return e.err }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

// invalid marks err as the submitter's (nil stays nil).
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return invalidError{err}
}
