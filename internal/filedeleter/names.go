package filedeleter

import (
	"github.com/taskserver/taskserver/internal/jobxml"
)

// gzSuffix ends the name of an input's gzip'd copy, which is stored beside
// the input: in the fan-out directory of the input's name.
const gzSuffix = ".gz"

// file is one file to delete: the file name stored in the fan-out directory
// of name, plus suffix (gzSuffix for an input's gzip'd copy, else empty).
type file struct {
	name, suffix string
}

// String is the file's name, for the log.
func (f file) String() string { return f.name + f.suffix }

// inputFiles returns the input files a workunit.xml_doc lists that are
// deleted with the job: not those marked <no_delete/> (shared files,
// deleted when no job refers to them; files the project keeps) nor those
// kept on another server (<url>); with each, its gzip'd copy if it has one.
func inputFiles(doc string) ([]file, error) {
	w, err := jobxml.ParseWorkunit(doc)
	if err != nil {
		return nil, err
	}
	files := make([]file, 0, len(w.Inputs))
	for _, in := range w.Inputs {
		if in.NoDelete || len(in.URLs) != 0 {
			continue
		}
		files = append(files, file{name: in.Name})
		if in.GzippedNbytes > 0 {
			files = append(files, file{name: in.Name, suffix: gzSuffix})
		}
	}
	return files, nil
}

// outputFiles returns the output files a result.xml_doc_in lists.
func outputFiles(doc string) ([]file, error) {
	outs, err := jobxml.ParseResult(doc)
	if err != nil {
		return nil, err
	}
	files := make([]file, len(outs))
	for i, out := range outs {
		files[i] = file{name: out.Name}
	}
	return files, nil
}
