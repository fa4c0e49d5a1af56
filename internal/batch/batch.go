package batch

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Errors callers map to answers (HTTP status codes, exit messages).
var (
	// ErrInvalid means the request itself is wrong: a bad name, a missing
	// app, inconsistent parameters.
	ErrInvalid = errors.New("invalid request")
	// ErrTooLarge means the request passes a size limit.
	ErrTooLarge = errors.New("request too large")
	// ErrExists means the batch name, or a job name, is taken.
	ErrExists = errors.New("already exists")
	// ErrKeyReused means the idempotency key was used before for another
	// batch.
	ErrKeyReused = errors.New("idempotency key used for another batch")
	// ErrNotCancellable means the batch or job is past cancelling (done,
	// or cancelled already), or a job to requeue is not held.
	ErrNotCancellable = errors.New("not in a state that allows this")
)

// Store is what batches need from the database.
type Store interface {
	jobs.Store
	AppGetByName(ctx context.Context, name string) (row.App, error)
	AppList(ctx context.Context) ([]row.App, error)
	BatchCancel(ctx context.Context, id, now int64) (int64, error)
	BatchCountJobs(ctx context.Context, ids []int64) (map[int64]store.BatchCounts, error)
	BatchGet(ctx context.Context, id int64) (row.Batch, error)
	BatchGetByKey(ctx context.Context, userID int64, key string) (row.Batch, error)
	BatchGetByName(ctx context.Context, name string) (row.Batch, error)
	BatchList(ctx context.Context, p store.BatchListParams) ([]row.Batch, error)
	WorkunitCancel(ctx context.Context, id, now int64) error
	WorkunitListByBatch(ctx context.Context, batch, afterID int64, limit int) ([]row.Workunit, error)
	WorkunitRequeue(ctx context.Context, id, now int64) error
	WorkunitRequeueBatch(ctx context.Context, id int64, reason state.ErrorMask, now int64) (int64, error)
	WorkunitRequeueReason(ctx context.Context, reason state.ErrorMask, now int64) (int64, error)
}

// Limits bound one submission.
type Limits struct {
	// MaxJobs is the most jobs in a batch; 0 means 10,000.
	MaxJobs int
	// MaxInputBytes is the largest input file of one job; 0 means 64 MiB.
	MaxInputBytes int64
	// MaxTotalBytes is the most input bytes in a batch; 0 means 1 GiB.
	MaxTotalBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxJobs <= 0 {
		l.MaxJobs = 10_000
	}
	if l.MaxInputBytes <= 0 {
		l.MaxInputBytes = 64 << 20
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = 1 << 30
	}
	return l
}

// Options configure a Service.
type Options struct {
	Store Store
	// DownloadDir and Fanout locate staged input files.
	DownloadDir string
	Fanout      int
	// ResultsDir is where the assimilator's file handler writes outputs;
	// empty disables Outputs.
	ResultsDir string
	Limits     Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service submits and manages batches.
type Service struct {
	st         Store
	creator    *jobs.Creator
	resultsDir string
	limits     Limits
	now        func() time.Time
}

// New returns a Service.
func New(o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{st: o.Store, creator: jobs.NewCreator(o.Store, o.DownloadDir, o.Fanout, o.Now),
		resultsDir: o.ResultsDir, limits: o.Limits.withDefaults(), now: o.Now}
}

// Job is one job of a batch: its name within the batch, the files given
// to it (one per file of its input template that the template does not
// name itself, in order) and its command line (empty: the template's).
type Job struct {
	Name        string
	Inputs      []jobs.Input
	CommandLine string
}

// Spec is a batch to submit.
type Spec struct {
	// App is the app's name.
	App         string
	Name        string
	Description string
	// IdempotencyKey, if not empty, makes a repeated submission by the same
	// user return the first batch instead of creating another.
	IdempotencyKey string
	// UserID is the submitter (0 for the operator).
	UserID int64
	// Jobs are named <batch name>_<job name> in the database.
	Jobs   []Job
	Params jobs.Params
	// InputTemplate and OutputTemplate are the batch's templates in BOINC's
	// format, for every job; empty means the app's.
	InputTemplate, OutputTemplate string
}

// Name limits. A job's full name, its input file and its output files must
// fit the database and file systems with room to spare.
const (
	MaxBatchNameLen   = 128
	MaxJobNameLen     = 100
	MaxDescriptionLen = 1024
	MaxKeyLen         = 254
)

// nameRE is what batch and job names may be: they become file names, URL
// path segments and tar entries.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// JobName is the database name of job job of batch batchName.
func JobName(batchName, job string) string { return batchName + "_" + job }

func checkName(what, name string, maxLen int) error {
	if len(name) > maxLen {
		return fmt.Errorf("%w: %s %.40q...: longer than %d bytes", ErrInvalid, what, name, maxLen)
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s %q: want letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, what, name)
	}
	return nil
}

// check validates s against the limits without touching the database.
func (s *Service) check(spec Spec) error {
	var errs []error
	if spec.App == "" {
		errs = append(errs, fmt.Errorf("%w: app is empty", ErrInvalid))
	}
	if err := checkName("batch name", spec.Name, MaxBatchNameLen); err != nil {
		errs = append(errs, err)
	}
	if len(spec.Description) > MaxDescriptionLen {
		errs = append(errs, fmt.Errorf("%w: description longer than %d bytes", ErrInvalid, MaxDescriptionLen))
	}
	if len(spec.IdempotencyKey) > MaxKeyLen {
		errs = append(errs, fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxKeyLen))
	}
	if err := spec.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: job parameters: %w", ErrInvalid, err))
	}
	if len(spec.Jobs) == 0 {
		errs = append(errs, fmt.Errorf("%w: a batch needs at least one job", ErrInvalid))
	}
	if len(spec.Jobs) > s.limits.MaxJobs {
		errs = append(errs, fmt.Errorf("%w: %d jobs, at most %d allowed", ErrTooLarge, len(spec.Jobs), s.limits.MaxJobs))
	}
	seen := make(map[string]bool, len(spec.Jobs))
	var total int64
	for _, j := range spec.Jobs {
		if err := checkName("job name", j.Name, MaxJobNameLen); err != nil {
			errs = append(errs, err)
		} else if seen[j.Name] {
			errs = append(errs, fmt.Errorf("%w: job name %q used twice", ErrInvalid, j.Name))
		}
		seen[j.Name] = true
		if len(j.Inputs) > jobs.MaxInputs {
			errs = append(errs, fmt.Errorf("%w: job %q has %d input files, at most %d allowed", ErrTooLarge, j.Name, len(j.Inputs), jobs.MaxInputs))
		}
		for k, in := range j.Inputs {
			if n := int64(len(in.Data)); n > s.limits.MaxInputBytes {
				errs = append(errs, fmt.Errorf("%w: input %d of job %q is %d bytes, at most %d allowed", ErrTooLarge, k, j.Name, n, s.limits.MaxInputBytes))
			}
			total += int64(len(in.Data))
		}
		if len(errs) > 10 {
			break // enough to go on with
		}
	}
	if total > s.limits.MaxTotalBytes {
		errs = append(errs, fmt.Errorf("%w: inputs total %d bytes, at most %d allowed", ErrTooLarge, total, s.limits.MaxTotalBytes))
	}
	return errors.Join(errs...)
}

// Submit creates the batch spec describes with all its jobs, in one
// transaction, and returns it with true. If spec.UserID already submitted a
// batch with spec.IdempotencyKey, nothing is created and that batch is
// returned with false (ErrKeyReused if it had another name).
func (s *Service) Submit(ctx context.Context, spec Spec) (row.Batch, bool, error) {
	if err := s.check(spec); err != nil {
		return row.Batch{}, false, err
	}
	if spec.IdempotencyKey != "" {
		b, err := s.st.BatchGetByKey(ctx, spec.UserID, spec.IdempotencyKey)
		if err == nil {
			return s.replay(b, spec)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return row.Batch{}, false, err
		}
	}
	app, err := s.st.AppGetByName(ctx, spec.App)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return row.Batch{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return row.Batch{}, false, err
	}
	if app.Deprecated {
		return row.Batch{}, false, fmt.Errorf("%w: app %q is deprecated", ErrInvalid, app.Name)
	}
	// Checked first so that a taken name costs no staged files; the unique
	// index still decides a race.
	if _, err := s.st.BatchGetByName(ctx, spec.Name); err == nil {
		return row.Batch{}, false, fmt.Errorf("batch %q: %w", spec.Name, ErrExists)
	} else if !errors.Is(err, store.ErrNotFound) {
		return row.Batch{}, false, err
	}
	list := make([]jobs.Job, len(spec.Jobs))
	for i, j := range spec.Jobs {
		list[i] = jobs.Job{Name: JobName(spec.Name, j.Name), Inputs: j.Inputs, CommandLine: j.CommandLine,
			InputTemplate: spec.InputTemplate, OutputTemplate: spec.OutputTemplate}
	}
	b, created, err := s.creator.CreateBatch(ctx, app, row.Batch{CreateTime: s.now().Unix(), UserID: spec.UserID,
		Name: spec.Name, Description: spec.Description, IdempotencyKey: spec.IdempotencyKey}, list, spec.Params)
	if errors.Is(err, store.ErrDuplicate) {
		return row.Batch{}, false, fmt.Errorf("batch %q or one of its job names: %w", spec.Name, ErrExists)
	}
	if errors.Is(err, jobs.ErrInvalid) {
		return row.Batch{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return row.Batch{}, false, fmt.Errorf("submit batch %q: %w", spec.Name, err)
	}
	if !created {
		return s.replay(b, spec)
	}
	return b, true, nil
}

// replay answers a submission whose key found batch b.
func (s *Service) replay(b row.Batch, spec Spec) (row.Batch, bool, error) {
	if b.Name != spec.Name {
		return row.Batch{}, false, fmt.Errorf("%w: key was used for batch %q", ErrKeyReused, b.Name)
	}
	return b, false, nil
}

// Find returns the batch ref names: an id, or else a name.
func (s *Service) Find(ctx context.Context, ref string) (row.Batch, error) {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		b, err := s.st.BatchGet(ctx, id)
		if !errors.Is(err, store.ErrNotFound) {
			return b, err
		}
	}
	return s.st.BatchGetByName(ctx, ref)
}

// StageShared stages data as shared file name (see jobs.Creator.StageShared).
// A bad name is ErrInvalid.
func (s *Service) StageShared(ctx context.Context, name string, data []byte, gz bool) (row.SharedFile, error) {
	if int64(len(data)) > s.limits.MaxInputBytes {
		return row.SharedFile{}, fmt.Errorf("%w: shared file %q is %d bytes, at most %d allowed", ErrTooLarge, name, len(data), s.limits.MaxInputBytes)
	}
	f, err := s.creator.StageShared(ctx, name, data, gz)
	if errors.Is(err, jobs.ErrInvalid) {
		return f, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return f, err
}

// Get returns batch id.
func (s *Service) Get(ctx context.Context, id int64) (row.Batch, error) {
	return s.st.BatchGet(ctx, id)
}

// Cancel cancels batch b and returns how many of its jobs were stopped.
// Cancelling a cancelled batch again finishes an interrupted cancel; a done
// batch is ErrNotCancellable.
func (s *Service) Cancel(ctx context.Context, b row.Batch) (int64, error) {
	n, err := s.st.BatchCancel(ctx, b.ID, s.now().Unix())
	if errors.Is(err, store.ErrConflict) {
		return 0, fmt.Errorf("cancel batch %q: %w (it is done)", b.Name, ErrNotCancellable)
	}
	return n, err
}

// Job returns the job called name.
func (s *Service) Job(ctx context.Context, name string) (row.Workunit, error) {
	return s.st.WorkunitGetByName(ctx, name)
}

// CancelJob cancels job wu. A job with a result already, or failed, or
// cancelled, is ErrNotCancellable.
func (s *Service) CancelJob(ctx context.Context, wu row.Workunit) error {
	err := s.st.WorkunitCancel(ctx, wu.ID, s.now().Unix())
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("cancel job %q: %w (it has a result, failed or was cancelled)", wu.Name, ErrNotCancellable)
	}
	return err
}

// RequeueJob releases held job wu with its limits raised; a job not held is
// ErrNotCancellable.
func (s *Service) RequeueJob(ctx context.Context, wu row.Workunit) error {
	err := s.st.WorkunitRequeue(ctx, wu.ID, s.now().Unix())
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("requeue job %q: %w (it is not held)", wu.Name, ErrNotCancellable)
	}
	return err
}

// RequeueBatch releases the held jobs of batch b whose hold reason includes
// reason (0: all held jobs), and returns how many.
func (s *Service) RequeueBatch(ctx context.Context, b row.Batch, reason state.ErrorMask) (int64, error) {
	return s.st.WorkunitRequeueBatch(ctx, b.ID, reason, s.now().Unix())
}

// RequeueReason releases every held job whose hold reason includes reason,
// and returns how many.
func (s *Service) RequeueReason(ctx context.Context, reason state.ErrorMask) (int64, error) {
	if reason == 0 {
		return 0, fmt.Errorf("%w: no hold reason given", ErrInvalid)
	}
	return s.st.WorkunitRequeueReason(ctx, reason, s.now().Unix())
}

// ParseReason reads a hold reason: an error bit's name as state.ErrorMask
// prints it (too_many_error_results, ...) or its number.
func ParseReason(s string) (state.ErrorMask, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return state.ErrorMask(n), nil
	}
	for bit := state.ErrorMask(1); bit <= state.ErrNoCanonicalResult; bit <<= 1 {
		if bit.String() == s {
			return bit, nil
		}
	}
	var names []string
	for bit := state.ErrorMask(1); bit <= state.ErrNoCanonicalResult; bit <<= 1 {
		if bit != state.ErrCancelled {
			names = append(names, bit.String())
		}
	}
	return 0, fmt.Errorf("%w: hold reason %q: want one of %v", ErrInvalid, s, names)
}
