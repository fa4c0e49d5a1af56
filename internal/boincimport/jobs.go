package boincimport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// jobs imports the jobs in flight with all their instances, a chunk of
// jobs at a time, each chunk in one transaction, and then writes the
// upload permits of their tasks without certificates: those of jobs
// imported before too, so a run after a crash between the two writes
// them.
func (im *Importer) jobs(ctx context.Context, inFlight, instances int64, rep *Report) (TableReport, TableReport, error) {
	wr := TableReport{Table: "workunit", Source: inFlight}
	rr := TableReport{Table: "result", Source: instances}
	start := time.Now()
	pr := im.newProgress("workunit", inFlight)
	wuMax, err := im.dst.ImportMaxID(ctx, "workunit")
	if err != nil {
		return wr, rr, err
	}
	resMax, err := im.dst.ImportMaxID(ctx, "result")
	if err != nil {
		return wr, rr, err
	}
	var after int64
	var seen int64
	var permits []outputfile.Permit
	for {
		wus, err := im.src.WorkunitInFlightList(ctx, after, im.cfg.Chunk)
		if err != nil {
			return wr, rr, err
		}
		if len(wus) == 0 {
			break
		}
		after = wus[len(wus)-1].ID
		seen += int64(len(wus))
		ids := make([]int64, len(wus))
		for i, w := range wus {
			ids[i] = w.ID
		}
		results, err := im.src.ResultListByWorkunits(ctx, ids)
		if err != nil {
			return wr, rr, err
		}
		byWU := map[int64][]row.Result{}
		for _, r := range results {
			byWU[r.WorkunitID] = append(byWU[r.WorkunitID], r)
		}
		// A killed import's last statement may commit after this run read
		// our largest ids: a duplicate id then means "check these rows".
		savedW, savedR := wr, rr
		ps, err := im.jobChunk(ctx, &wr, &rr, wus, ids, byWU, wuMax, resMax)
		if errors.Is(err, store.ErrDuplicate) {
			wr, rr = savedW, savedR
			ps, err = im.jobChunk(ctx, &wr, &rr, wus, ids, byWU, -1, -1)
		}
		if err != nil {
			return wr, rr, err
		}
		permits = append(permits, ps...)
		pr.note(seen)
	}
	if err := im.writePermits(permits, rep); err != nil {
		return wr, rr, err
	}
	pr.done(wr, time.Since(start))
	return wr, rr, nil
}

// writePermits writes the upload permits (none in a dry run) and reports
// them.
func (im *Importer) writePermits(ps []outputfile.Permit, rep *Report) error {
	rep.UploadPermits = int64(len(ps))
	for _, p := range ps {
		rep.PermitsExpire = max(rep.PermitsExpire, p.Expires)
	}
	if im.cfg.DryRun || len(ps) == 0 {
		return nil
	}
	if im.cfg.UploadDir == "" {
		return fmt.Errorf("%d outputs of tasks in flight carry no upload certificate: give our upload directory (--upload-dir) for their permits", len(ps))
	}
	return outputfile.WritePermits(im.cfg.UploadDir, im.cfg.Fanout, ps)
}

// jobChunk imports one chunk of jobs (ids, with their instances byWU) not
// yet here; ids above wuMax and resMax are taken not to be here without
// asking (-1 asks for all). It returns the upload permits of the chunk's
// jobs, imported now or before (UploadPermits).
func (im *Importer) jobChunk(ctx context.Context, wr, rr *TableReport, wus []store.BoincWorkunit, ids []int64, byWU map[int64][]row.Result,
	wuMax, resMax int64) ([]outputfile.Permit, error) {
	write, err := im.check(ctx, wr, "workunit", ids, wuMax, func(i int) string { return wus[i].Name })
	if err != nil {
		return nil, err
	}
	// The instances of a job not yet here must not be here either.
	var rids []int64
	var rnames []string
	for i, w := range wus {
		if !write[i] {
			rr.Present += int64(len(byWU[w.ID]))
			continue
		}
		for _, r := range byWU[w.ID] {
			rids = append(rids, r.ID)
			rnames = append(rnames, r.Name)
		}
	}
	rwrite, err := im.check(ctx, rr, "result", rids, resMax, func(i int) string { return rnames[i] })
	if err != nil {
		return nil, err
	}
	clash := map[int64]bool{}
	for i, ok := range rwrite {
		if !ok {
			clash[rids[i]] = true
		}
	}
	var outWUs []row.Workunit
	var outResults []row.Result
	var permits []outputfile.Permit
	for i, w := range wus {
		rs := byWU[w.ID]
		ps, err := UploadPermits(rs, im.cfg.UploadGrace) // from BOINC's documents: before convertJob
		if !write[i] {
			permits = append(permits, ps...)
			continue
		}
		if err == nil {
			err = im.convertJob(ctx, &w, rs, clash)
		}
		if err != nil {
			im.skip(wr, w.ID, err)
			rr.Skipped += int64(len(rs))
			continue
		}
		outWUs = append(outWUs, w.Workunit)
		outResults = append(outResults, rs...)
		permits = append(permits, ps...)
	}
	if !im.cfg.DryRun {
		if err := im.dst.JobsImport(ctx, outWUs, outResults); err != nil {
			return nil, err
		}
	}
	wr.Imported += int64(len(outWUs))
	rr.Imported += int64(len(outResults))
	return permits, nil
}

// errClash is why a job whose instance's id our database holds (with a
// dry run going on past the conflict) is not imported.
var errClash = errors.New("an instance's id is another row's in our database")

// convertJob turns one BOINC job and its instances into ours, in place:
// documents in our form, the job's output template stored, batches
// dropped (BOINC's batch table is not imported).
func (im *Importer) convertJob(ctx context.Context, w *storeWorkunit, rs []row.Result, clash map[int64]bool) error {
	doc, err := ConvertWorkunit(w.XMLDoc, im.cfg.OldDownloadURL, im.cfg.Fanout)
	if err != nil {
		return fmt.Errorf("job %s: %w", w.Name, err)
	}
	w.XMLDoc = doc
	w.Batch = 0
	var tmpl *jobtemplate.Output
	for i := range rs {
		r := &rs[i]
		if clash[r.ID] {
			return errClash
		}
		in, t, err := ConvertResult(r.Name, r.XMLDocIn)
		if err != nil {
			return fmt.Errorf("job %s: %w", w.Name, err)
		}
		if tmpl == nil {
			tmpl = &t
		}
		r.XMLDocIn = in
		r.Batch = 0
	}
	if tmpl == nil {
		t, err := im.templateFile(w.ResultTemplateFile)
		if err != nil {
			return fmt.Errorf("job %s has no instance to take its outputs from: %w", w.Name, err)
		}
		tmpl = &t
	}
	id, err := im.outputTemplate(ctx, *tmpl)
	if err != nil {
		return fmt.Errorf("job %s: output template: %w", w.Name, err)
	}
	w.OutputTemplateID = id
	return nil
}

// templateFile reads an output template from the BOINC project's
// directory.
func (im *Importer) templateFile(rel string) (jobtemplate.Output, error) {
	if im.cfg.OldProjectDir == "" {
		return jobtemplate.Output{}, errors.New("give --boinc-project-dir to read its result_template_file")
	}
	if !filepath.IsLocal(rel) {
		return jobtemplate.Output{}, fmt.Errorf("result_template_file %q is not a path inside the project", rel)
	}
	b, err := os.ReadFile(filepath.Join(im.cfg.OldProjectDir, rel))
	if err != nil {
		return jobtemplate.Output{}, err
	}
	return jobtemplate.ParseOutput(string(b))
}
