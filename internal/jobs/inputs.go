package jobs

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// templates resolves the templates and shared files of one submission's
// jobs, each read (and stored) once.
type templates struct {
	st     Store
	app    row.App
	now    int64
	inputs map[string]jobtemplate.Input
	outIDs map[string]int64
	appIn  *jobtemplate.Input
	// shared are the shared files found by the names jobs gave: a batch
	// of jobs all naming one model looks it up once.
	shared map[string]row.SharedFile
}

func newTemplates(st Store, app row.App, now int64) *templates {
	return &templates{st: st, app: app, now: now, inputs: map[string]jobtemplate.Input{}, outIDs: map[string]int64{},
		shared: map[string]row.SharedFile{}}
}

// input returns the job's input template: text if not empty, else the
// app's, else the built-in one.
func (t *templates) input(ctx context.Context, text string) (jobtemplate.Input, error) {
	if text != "" {
		if in, ok := t.inputs[text]; ok {
			return in, nil
		}
		in, err := jobtemplate.ParseInput(text)
		if err != nil {
			return in, invalid(err)
		}
		t.inputs[text] = in
		return in, nil
	}
	if t.appIn != nil {
		return *t.appIn, nil
	}
	in := jobtemplate.DefaultInput()
	if t.app.InputTemplateID != 0 {
		row, err := t.st.JobTemplateGet(ctx, t.app.InputTemplateID)
		if err != nil {
			return in, fmt.Errorf("app %s input template: %w", t.app.Name, err)
		}
		if in, err = jobtemplate.ParseInput(row.Body); err != nil {
			return in, fmt.Errorf("app %s: %w", t.app.Name, err)
		}
	}
	t.appIn = &in
	return in, nil
}

// output returns the id of the job's output template: text, checked and
// stored, if not empty; else the app's (0: the built-in one).
func (t *templates) output(ctx context.Context, text string) (int64, error) {
	if text == "" {
		return t.app.OutputTemplateID, nil
	}
	if id, ok := t.outIDs[text]; ok {
		return id, nil
	}
	if _, err := jobtemplate.ParseOutput(text); err != nil {
		return 0, invalid(err)
	}
	id, err := t.st.JobTemplatePut(ctx, jobtemplate.KindOutput, text, t.now)
	if err != nil {
		return 0, err
	}
	t.outIDs[text] = id
	return id, nil
}

// stageFile is a file to write into the download directory for a job.
type stageFile struct {
	name string
	data []byte
	gzip []byte // the gzip'd copy, nil for none
}

// md5Pattern is an md5 in hex, as BOINC writes it.
var md5Pattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// resolve describes each file of job's input template: the files given to
// the job (content to stage, a shared file, a remote file) and those the
// template names itself. It returns the files in template order, the shared
// files used, and the files to stage; nothing is written.
func (c *Creator) resolve(ctx context.Context, t *templates, job Job, in jobtemplate.Input, salt string) ([]jobtemplate.Resolved, []int64, []stageFile, error) {
	if n := in.NumGiven(); len(job.Inputs) != n {
		return nil, nil, nil, invalid(fmt.Errorf("its input template takes %d files, %d given", n, len(job.Inputs)))
	}
	var files []jobtemplate.Resolved
	var shared []int64
	var stage []stageFile
	given, data := 0, 0
	for i, f := range in.Files {
		var r jobtemplate.Resolved
		switch {
		case f.PhysicalName != "":
			sf, err := t.sharedFile(ctx, f.PhysicalName)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("input template file %d: %w", i, err)
			}
			r, shared = resolvedShared(sf, f.Gzip), append(shared, sf.ID)
		case len(f.URLs) > 0:
			r = jobtemplate.Resolved{Name: "jf_" + f.MD5, Nbytes: f.Nbytes, MD5: f.MD5, URLs: f.URLs}
		default:
			g := job.Inputs[given]
			given++
			kinds := 0
			for _, set := range []bool{g.Data != nil, g.Shared != "", g.URL != ""} {
				if set {
					kinds++
				}
			}
			if kinds > 1 {
				return nil, nil, nil, invalid(fmt.Errorf("input %d: give exactly one of its content, a shared file or a URL", given-1))
			}
			switch {
			case g.Shared != "":
				sf, err := t.sharedFile(ctx, g.Shared)
				if err != nil {
					return nil, nil, nil, fmt.Errorf("input %d: %w", given-1, err)
				}
				r, shared = resolvedShared(sf, f.Gzip), append(shared, sf.ID)
			case g.URL != "":
				if !strings.HasPrefix(g.URL, "http://") && !strings.HasPrefix(g.URL, "https://") {
					return nil, nil, nil, invalid(fmt.Errorf("input %d: URL %q: want http:// or https://", given-1, g.URL))
				}
				if !md5Pattern.MatchString(g.MD5) || !(g.Nbytes > 0) {
					return nil, nil, nil, invalid(fmt.Errorf("input %d: URL %s: a remote file needs its md5 (32 hex digits) and size (> 0), as the client checks them", given-1, g.URL))
				}
				if f.Gzip {
					return nil, nil, nil, invalid(fmt.Errorf("input %d: URL %s: <gzip/> is for files staged here", given-1, g.URL))
				}
				r = jobtemplate.Resolved{Name: "jf_" + g.MD5, Nbytes: g.Nbytes, MD5: g.MD5, URLs: []string{g.URL}}
			default:
				name := dataInputName(job.Name, salt, data)
				data++
				sf := stageFile{name: name, data: g.Data}
				r = jobtemplate.Resolved{Name: name, Nbytes: float64(len(g.Data)), MD5: md5Hex(g.Data)}
				if f.Gzip {
					z, err := gzipped(g.Data)
					if err != nil {
						return nil, nil, nil, err
					}
					sf.gzip, r.GzippedNbytes = z, float64(len(z))
				}
				stage = append(stage, sf)
			}
		}
		files = append(files, r)
	}
	return files, shared, stage, nil
}

// resolvedShared describes a shared file for a job. A template asking for
// <gzip/> gets the gzip'd copy only if one was staged.
func resolvedShared(sf row.SharedFile, gz bool) jobtemplate.Resolved {
	r := jobtemplate.Resolved{Name: sf.Name, Nbytes: sf.Nbytes, MD5: sf.MD5, NoDelete: true}
	if gz {
		r.GzippedNbytes = sf.GzippedNbytes
	}
	return r
}

// sharedFile finds a live shared file by its physical name, or else the
// latest staged under name. The insert checks again that it is live.
func (t *templates) sharedFile(ctx context.Context, name string) (row.SharedFile, error) {
	if sf, ok := t.shared[name]; ok {
		return sf, nil
	}
	sf, err := t.st.SharedFileGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		sf, err = t.st.SharedFileLatest(ctx, name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return sf, invalid(fmt.Errorf("shared file %q is not staged (taskctl file stage)", name))
	}
	if err != nil {
		return sf, err
	}
	if sf.State != row.SharedFileLive {
		return sf, invalid(fmt.Errorf("shared file %q: %w", sf.Name, store.ErrSharedFileGone))
	}
	t.shared[name] = sf
	return sf, nil
}

// gzipWriters are reused: a new gzip.Writer allocates about 800 KB of
// compressor state, which for a batch of small inputs cost more CPU
// (allocation and GC) than compressing them.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// gzipped is data gzip'd, as the client's download of a <gzipped_url>
// expects.
func gzipped(data []byte) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(data)/2 + 64)
	w := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(w)
	w.Reset(&b)
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// SharedName is the physical name of a shared file staged under name with
// content of md5 sum: content-addressed, so staging the same content again
// changes nothing and new content never replaces a file jobs use.
func SharedName(name, md5 string) string { return name + "_" + md5 }

// StageShared stages data as a shared file called name (the logical name
// jobs may refer to it by; its physical name is SharedName), with a gzip'd
// copy if gz, and records it. Staging the same content again only marks it
// used now.
func (c *Creator) StageShared(ctx context.Context, name string, data []byte, gz bool) (row.SharedFile, error) {
	sum := md5Hex(data)
	phys := SharedName(name, sum)
	if err := checkName(name, phys+".gz"); err != nil {
		return row.SharedFile{}, invalid(fmt.Errorf("shared file: %w", err))
	}
	if existing, err := c.st.SharedFileGet(ctx, phys); err == nil && existing.State == row.SharedFileLive && (existing.GzippedNbytes > 0 || !gz) {
		return c.st.SharedFileRegister(ctx, existing) // on disk already; mark it used now
	}
	files := newStager(c.downloadDir, c.fanout)
	if err := files.write(phys, data); err != nil {
		return row.SharedFile{}, err
	}
	var gzN float64
	if gz {
		z, err := gzipped(data)
		if err != nil {
			return row.SharedFile{}, err
		}
		if err := files.writeBeside(phys, ".gz", z); err != nil {
			return row.SharedFile{}, err
		}
		gzN = float64(len(z))
	}
	if err := files.sync(); err != nil {
		return row.SharedFile{}, err
	}
	now := c.now().Unix()
	return c.st.SharedFileRegister(ctx, row.SharedFile{CreateTime: now, Name: phys, MD5: sum, Nbytes: float64(len(data)),
		GzippedNbytes: gzN, LastRefTime: now})
}

// withTemplate is p with the parameters an input template sets, where p
// has its default value: a template's value replaces a default, a value
// given explicitly wins (as create_work's options override the template).
func (p Params) withTemplate(t jobtemplate.Params) Params {
	d := DefaultParams()
	setF := func(dst *float64, def float64, v *float64) {
		if v != nil && *dst == def {
			*dst = *v
		}
	}
	setI := func(dst *int, def int, v *int) {
		if v != nil && *dst == def {
			*dst = *v
		}
	}
	setF(&p.RscFpopsEst, d.RscFpopsEst, t.RscFpopsEst)
	setF(&p.RscFpopsBound, d.RscFpopsBound, t.RscFpopsBound)
	setF(&p.RscMemoryBound, d.RscMemoryBound, t.RscMemoryBound)
	setF(&p.RscDiskBound, d.RscDiskBound, t.RscDiskBound)
	if t.DelayBound != nil && p.DelayBound == d.DelayBound {
		p.DelayBound = time.Duration(*t.DelayBound * float64(time.Second))
	}
	setI(&p.MinQuorum, d.MinQuorum, t.MinQuorum)
	setI(&p.TargetNResults, d.TargetNResults, t.TargetNResults)
	setI(&p.MaxErrorResults, d.MaxErrorResults, t.MaxErrorResults)
	setI(&p.MaxTotalResults, d.MaxTotalResults, t.MaxTotalResults)
	setI(&p.MaxSuccessResults, d.MaxSuccessResults, t.MaxSuccessResults)
	setI(&p.Priority, d.Priority, t.Priority)
	// BOINC raises the limits to the target when a template sets it alone.
	p.MaxSuccessResults = max(p.MaxSuccessResults, p.TargetNResults)
	p.MaxTotalResults = max(p.MaxTotalResults, p.TargetNResults)
	return p
}
