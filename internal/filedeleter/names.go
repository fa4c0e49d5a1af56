package filedeleter

import (
	"github.com/taskserver/taskserver/internal/jobxml"
)

// inputNames returns the names of the input files a workunit.xml_doc lists
// that are deleted with the job: not those marked <no_delete/> (shared
// files, deleted when no job refers to them; files the project keeps) nor
// those kept on another server (<url>).
func inputNames(doc string) ([]string, error) {
	w, err := jobxml.ParseWorkunit(doc)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(w.Inputs))
	for _, in := range w.Inputs {
		if !in.NoDelete && len(in.URLs) == 0 {
			names = append(names, in.Name)
		}
	}
	return names, nil
}

// outputNames returns the names of the output files a result.xml_doc_in
// lists.
func outputNames(doc string) ([]string, error) {
	outs, err := jobxml.ParseResult(doc)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(outs))
	for i, out := range outs {
		names[i] = out.Name
	}
	return names, nil
}
