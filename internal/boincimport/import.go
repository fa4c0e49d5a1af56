package boincimport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Source is the BOINC database, read only; *store.BoincDB.
type Source interface {
	ImportRowsList(ctx context.Context, t store.ImportTable, afterID int64, limit int) ([]store.ImportRow, error)
	AppVersionList(ctx context.Context) ([]row.AppVersion, error)
	WorkunitInFlightList(ctx context.Context, afterID int64, limit int) ([]store.BoincWorkunit, error)
	ResultListByWorkunits(ctx context.Context, wuIDs []int64) ([]row.Result, error)
	JobCounts(ctx context.Context) (all, inFlight, instances int64, err error)
	ImportCounts(ctx context.Context) ([]store.ImportCount, error)
}

// Target is our database; *store.Store.
type Target interface {
	ImportIdentities(ctx context.Context, table string, ids []int64) (map[int64]string, error)
	ImportMaxID(ctx context.Context, table string) (int64, error)
	ImportRowsInsert(ctx context.Context, t store.ImportTable, rows []store.ImportRow) error
	AppVersionImport(ctx context.Context, v row.AppVersion) error
	JobsImport(ctx context.Context, wus []row.Workunit, results []row.Result) error
	JobTemplatePut(ctx context.Context, kind, body string, now int64) (int64, error)
	ImportCounts(ctx context.Context) ([]store.ImportCount, error)
}

// Config is what an import needs besides the two databases.
type Config struct {
	// DryRun reads both databases and reports what the import would do,
	// writing nothing (no row, no template, no file).
	DryRun bool
	// Chunk is how many rows are read and written at a time (default
	// 1000).
	Chunk int
	// OldDownloadURL is the BOINC project's download URL (config.xml
	// <download_url>): job inputs under it become files of our download
	// directory. Empty keeps every input's URL as it is.
	OldDownloadURL string
	// OldDownloadDir is the BOINC project's download directory
	// (config.xml <download_dir>), where BOINC keeps app version files
	// unhashed: the import reads their md5 there (BOINC's app_version
	// documents carry none) and links them into DownloadDir.
	OldDownloadDir string
	// OldProjectDir is the BOINC project's directory: a job without an
	// instance gets its output template from the file its
	// result_template_file names there.
	OldProjectDir string
	// DownloadDir and Fanout are ours (--download-dir, --fanout).
	DownloadDir string
	Fanout      int
	// UploadDir is ours (--upload-dir): the upload permits of tasks in
	// flight that carry no upload certificate go there (UploadPermits).
	// Needed only when there are such tasks.
	UploadDir string
	// UploadGrace is our scheduler's --upload-grace: a permit expires at
	// its instance's report deadline plus this.
	UploadGrace time.Duration
	// Progress, if set, hears a line per table and every ProgressEvery
	// while one is copied.
	Progress io.Writer
	// Log hears of skipped jobs; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports the first problem with c, worded as flags.
func (c Config) Validate() error {
	if c.Chunk < 0 || c.Chunk > 10000 {
		return fmt.Errorf("--chunk %d: want 1..10000", c.Chunk)
	}
	return config.CheckFanout(c.Fanout)
}

// ErrConflict is wrapped by the error of an import that found a row of ours
// at an id the BOINC database uses for another row.
var ErrConflict = errors.New("our database holds other rows at the BOINC project's ids")

// TableReport is what the import did, or would do, to one table.
type TableReport struct {
	Table string
	// Source is how many rows the BOINC database has to import.
	Source int64
	// Present were imported before (same id, same identity); Imported
	// were written now (in a dry run: would be).
	Present, Imported int64
	// Conflicts are rows of ours at the same id with another identity;
	// ConflictIDs lists the first of them.
	Conflicts   int64
	ConflictIDs []int64
	// Skipped rows cannot be imported (Reasons says why, for the first).
	Skipped int64
	Reasons []string
}

// Report is the outcome of an import.
type Report struct {
	DryRun bool
	Tables []TableReport
	// FinishedJobs are the BOINC jobs not imported: assimilated, failed,
	// or with a canonical result (left to BOINC's assimilator).
	FinishedJobs int64
	// AppFiles are the app version files placed in our download
	// directory; MissingAppFiles those the operator must place, as
	// paths under it.
	AppFiles, MissingAppFiles []string
	// UploadPermits are the outputs of tasks in flight without an upload
	// certificate that our data server accepts under a permit (in a dry
	// run: would); PermitsExpire is when the last permit expires (Unix).
	UploadPermits int64
	PermitsExpire int64
}

// maxListed bounds the ids and reasons a report lists per table.
const maxListed = 10

// Importer copies one BOINC database into ours.
type Importer struct {
	cfg Config
	src Source
	dst Target
	log *slog.Logger
	// mu guards the progress writer and the logged skips.
	mu sync.Mutex
	// templates maps an output template's body to its job_template id;
	// only the job copier uses it.
	templates map[string]int64
}

// New returns an importer from src into dst.
func New(cfg Config, src Source, dst Target) (*Importer, error) {
	if cfg.Chunk == 0 {
		cfg.Chunk = 1000
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Importer{cfg: cfg, src: src, dst: dst, log: log, templates: map[string]int64{}}, nil
}

// Run imports everything, or in a dry run reports what it would import.
// A conflict stops a real import (ErrConflict) before the chunk holding it
// is written; a dry run lists them all. The report so far comes back with
// an error.
func (im *Importer) Run(ctx context.Context) (Report, error) {
	rep := Report{DryRun: im.cfg.DryRun}
	counts, err := im.src.ImportCounts(ctx)
	if err != nil {
		return rep, err
	}
	sources := map[string]int64{}
	for _, c := range counts {
		sources[c.Table] = c.Rows
	}
	for _, t := range store.ImportTables[:2] { // platform, app
		tr, err := im.copyTable(ctx, t, sources[t.Name])
		rep.Tables = append(rep.Tables, tr)
		if err != nil {
			return rep, err
		}
	}
	tr, err := im.appVersions(ctx, &rep)
	rep.Tables = append(rep.Tables, tr)
	if err != nil {
		return rep, err
	}
	all, inFlight, instances, err := im.src.JobCounts(ctx)
	if err != nil {
		return rep, err
	}
	rep.FinishedJobs = all - inFlight
	// Teams, users, hosts and jobs refer to each other only by id, so
	// they are copied side by side: the database server, not one
	// connection's round trips, is then what bounds the import.
	people := store.ImportTables[2:] // team, user, host
	trs := make([]TableReport, len(people)+2)
	g, gctx := errgroup.WithContext(ctx)
	for i, t := range people {
		g.Go(func() (err error) {
			trs[i], err = im.copyTable(gctx, t, sources[t.Name])
			return err
		})
	}
	g.Go(func() (err error) {
		trs[len(people)], trs[len(people)+1], err = im.jobs(gctx, inFlight, instances, &rep)
		return err
	})
	err = g.Wait()
	rep.Tables = append(rep.Tables, trs...)
	return rep, err
}

// progress reports a table's progress every ProgressEvery.
type progress struct {
	mu    *sync.Mutex // the tables share the writer
	w     io.Writer
	table string
	total int64
	last  time.Time
}

// ProgressEvery is how often a long table's progress is printed.
const ProgressEvery = 10 * time.Second

func (im *Importer) newProgress(table string, total int64) *progress {
	return &progress{mu: &im.mu, w: im.cfg.Progress, table: table, total: total, last: time.Now()}
}

func (p *progress) note(done int64) {
	if p.w == nil || time.Since(p.last) < ProgressEvery {
		return
	}
	p.last = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.w, "%s: %d of %d\n", p.table, done, p.total)
}

func (p *progress) done(tr TableReport, took time.Duration) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.w, "%s: %d rows, %d imported, %d already here, %d conflicts, %d skipped (%.1fs)\n",
		p.table, tr.Source, tr.Imported, tr.Present, tr.Conflicts, tr.Skipped, took.Seconds())
}

// check sorts ids into those to write and those imported before, and
// counts conflicts; it returns ErrConflict in a real import.
// Ids above ourMax (our largest id when the table's copy started) are
// written without asking.
func (im *Importer) check(ctx context.Context, tr *TableReport, table string, ids []int64, ourMax int64, identity func(i int) string) ([]bool, error) {
	write := make([]bool, len(ids))
	if len(ids) > 0 && slices.Min(ids) > ourMax {
		for i := range write {
			write[i] = true
		}
		return write, nil
	}
	ours, err := im.dst.ImportIdentities(ctx, table, ids)
	if err != nil {
		return nil, err
	}
	var conflicts []int64
	for i, id := range ids {
		got, ok := ours[id]
		switch {
		case !ok:
			write[i] = true
		case got == identity(i):
			tr.Present++
		default:
			conflicts = append(conflicts, id)
		}
	}
	tr.Conflicts += int64(len(conflicts))
	for _, id := range conflicts {
		if len(tr.ConflictIDs) < maxListed {
			tr.ConflictIDs = append(tr.ConflictIDs, id)
		}
	}
	if len(conflicts) > 0 && !im.cfg.DryRun {
		return nil, fmt.Errorf("%s ids %v: %w (run with --dry-run to list them)", table, conflicts[:min(len(conflicts), maxListed)], ErrConflict)
	}
	return write, nil
}

// copyTable copies t column for column, a chunk at a time, reading the
// next chunk while it writes one.
func (im *Importer) copyTable(ctx context.Context, t store.ImportTable, total int64) (TableReport, error) {
	tr := TableReport{Table: t.Name}
	start := time.Now()
	pr := im.newProgress(t.Name, total)
	ourMax, err := im.dst.ImportMaxID(ctx, t.Name)
	if err != nil {
		return tr, err
	}
	g, gctx := errgroup.WithContext(ctx)
	chunks := make(chan []store.ImportRow, 2)
	g.Go(func() error {
		defer close(chunks)
		var after int64
		for {
			rows, err := im.src.ImportRowsList(gctx, t, after, im.cfg.Chunk)
			if err != nil || len(rows) == 0 {
				return err
			}
			after = rows[len(rows)-1].ID
			select {
			case chunks <- rows:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
	})
	g.Go(func() error {
		for rows := range chunks {
			tr.Source += int64(len(rows))
			// A killed import's last statement may commit after this
			// run read our largest id: a duplicate id then means "check
			// these rows".
			saved := tr
			err := im.rowChunk(gctx, &tr, t, rows, ourMax)
			if errors.Is(err, store.ErrDuplicate) {
				tr = saved
				err = im.rowChunk(gctx, &tr, t, rows, -1)
			}
			if err != nil {
				return err
			}
			pr.note(tr.Source)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return tr, err
	}
	pr.done(tr, time.Since(start))
	return tr, nil
}

// rowChunk writes those of rows not yet here; ids above ourMax are taken
// not to be here without asking (-1 asks for all).
func (im *Importer) rowChunk(ctx context.Context, tr *TableReport, t store.ImportTable, rows []store.ImportRow, ourMax int64) error {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	write, err := im.check(ctx, tr, t.Name, ids, ourMax, func(i int) string { return rows[i].Identity })
	if err != nil {
		return err
	}
	todo := rows[:0:0]
	for i, r := range rows {
		if write[i] {
			todo = append(todo, r)
		}
	}
	if !im.cfg.DryRun {
		if err := im.dst.ImportRowsInsert(ctx, t, todo); err != nil {
			return err
		}
	}
	tr.Imported += int64(len(todo))
	return nil
}

// skip records a row that cannot be imported.
func (im *Importer) skip(tr *TableReport, id int64, err error) {
	tr.Skipped++
	if len(tr.Reasons) < maxListed {
		tr.Reasons = append(tr.Reasons, fmt.Sprintf("%s %d: %v", tr.Table, id, err))
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	im.log.Warn("import: row skipped", "table", tr.Table, "id", id, "error", err)
}

// outputTemplate returns the job_template id of t, storing it on first use
// (0 in a dry run).
func (im *Importer) outputTemplate(ctx context.Context, t jobtemplate.Output) (int64, error) {
	body, err := FormatOutputTemplate(t)
	if err != nil {
		return 0, err
	}
	if id, ok := im.templates[body]; ok {
		return id, nil
	}
	var id int64
	if !im.cfg.DryRun {
		if id, err = im.dst.JobTemplatePut(ctx, jobtemplate.KindOutput, body, im.cfg.Now().Unix()); err != nil {
			return 0, err
		}
	}
	im.templates[body] = id
	return id, nil
}
