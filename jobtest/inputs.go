package jobtest

import (
	"os"
	"path/filepath"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
)

// JobInputs are a job's input files as its workunit document gives them.
type JobInputs struct {
	// Files are the contents by logical (open) name, read from the
	// download directory (shared files too).
	Files map[string][]byte
	// Sticky and Gzipped name the files marked sticky and those with a
	// gzip'd copy staged beside them.
	Sticky, Gzipped []string
	// CommandLine is the job's command line.
	CommandLine string
}

// Inputs returns job name's input files and command line.
func (p *Project) Inputs(name string) JobInputs {
	p.t.Helper()
	doc, err := jobxml.ParseWorkunit(p.job(name).XMLDoc)
	if err != nil {
		p.t.Fatalf("jobtest: job %s: %v", name, err)
	}
	in := JobInputs{Files: map[string][]byte{}, CommandLine: doc.CommandLine}
	for _, f := range doc.Inputs {
		path, err := fanout.Path(filepath.Join(p.Dir, "download"), f.Name, fanOut)
		if err != nil {
			p.t.Fatalf("jobtest: input %s of %s: %v", f.Name, name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			p.t.Fatalf("jobtest: input %s of %s: %v", f.Name, name, err)
		}
		in.Files[f.OpenName] = b
		if f.Sticky {
			in.Sticky = append(in.Sticky, f.OpenName)
		}
		if f.GzippedNbytes > 0 {
			if _, err := os.Stat(path + ".gz"); err != nil {
				p.t.Fatalf("jobtest: input %s of %s: the document offers a gzip'd copy: %v", f.Name, name, err)
			}
			in.Gzipped = append(in.Gzipped, f.OpenName)
		}
	}
	return in
}
