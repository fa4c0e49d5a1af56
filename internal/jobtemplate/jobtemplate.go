// Package jobtemplate reads BOINC's input and output templates, the files
// a BOINC project passes to create_work, and makes from them the documents
// stored with a job (package jobxml): the input template describes the
// job's input files (<file_info>: number, sticky, no_delete, gzip, url,
// md5_cksum, nbytes, physical_name), how the application opens them
// (<workunit><file_ref>: file_number, open_name, copy_file), its command
// line and its resource and redundancy parameters; the output template
// describes each instance's output files (<file_info> named <OUTFILE_n/>
// with its max_nbytes, and <result><file_ref> with open_name, copy_file,
// optional, no_validate).
//
// Templates are checked when they are read, so a job is refused at
// submission rather than failing later: an output without a size limit, a
// file_ref to a file the template does not describe, a name with a path
// in it.
package jobtemplate

import (
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
)

// Kinds of template, as stored in job_template.kind.
const (
	KindInput  = "input"
	KindOutput = "output"
)

// Input is a parsed input template.
type Input struct {
	// Files are the template's <file_info> elements in order.
	Files []InputFile
	// CommandLine is the template's command line ("" for none).
	CommandLine string
	// Params are the job parameters the template sets.
	Params Params
}

// InputFile is one <file_info> of an input template, with the <file_ref>
// that opens it.
type InputFile struct {
	// Number is the file's <number>: its position among the files given at
	// submission; -1 for a file the template names itself.
	Number int
	// PhysicalName names a file already staged (a shared file, BOINC's
	// "constant file"); the job is not given it.
	PhysicalName string
	// URLs, MD5 and Nbytes describe a file kept on another server, given
	// in the template (BOINC's "remote file specified in template").
	URLs   []string
	MD5    string
	Nbytes float64
	// Gzip offers the client a gzip'd copy.
	Gzip     bool
	Sticky   bool
	NoDelete bool
	// OpenName and CopyFile come from the <file_ref> of the file.
	OpenName string
	CopyFile bool
}

// Given reports whether the file is one of those given at submission (not
// named in the template itself).
func (f InputFile) Given() bool { return f.PhysicalName == "" && len(f.URLs) == 0 }

// Params are the job parameters an input template may set; nil for those
// it leaves to the submitter's options and the defaults.
type Params struct {
	RscFpopsEst       *float64
	RscFpopsBound     *float64
	RscMemoryBound    *float64
	RscDiskBound      *float64
	DelayBound        *float64 // seconds
	MinQuorum         *int
	TargetNResults    *int
	MaxErrorResults   *int
	MaxTotalResults   *int
	MaxSuccessResults *int
	Priority          *int
}

// Output is a parsed output template.
type Output struct {
	Files []OutputFile
}

// OutputFile is one output file of an output template.
type OutputFile struct {
	// Number is n of <OUTFILE_n/>: the output is <instance name>_<n>.
	Number     int
	MaxNbytes  float64
	OpenName   string
	CopyFile   bool
	Optional   bool
	NoValidate bool
}

// The built-in templates, used where an app names none: one input opened
// as "in" and one output opened as "out", both copied into and out of the
// slot, for an application that does not resolve logical names.
const (
	DefaultInputOpenName  = "in"
	DefaultOutputOpenName = "out"
)

// DefaultInput is the built-in input template.
func DefaultInput() Input {
	return Input{Files: []InputFile{{Number: 0, OpenName: DefaultInputOpenName, CopyFile: true}}}
}

// DefaultOutput is the built-in output template, with maxNbytes as its
// size limit.
func DefaultOutput(maxNbytes float64) Output {
	return Output{Files: []OutputFile{{Number: 0, MaxNbytes: maxNbytes, OpenName: DefaultOutputOpenName, CopyFile: true}}}
}

// Outputs are the output files of the instance called result.
func (o Output) Outputs(result string) []jobxml.OutputFile {
	out := make([]jobxml.OutputFile, len(o.Files))
	for i, f := range o.Files {
		out[i] = jobxml.OutputFile{Name: jobxml.OutputName(result, f.Number), OpenName: f.OpenName, MaxNbytes: f.MaxNbytes,
			Optional: f.Optional, NoValidate: f.NoValidate, CopyFile: f.CopyFile}
	}
	return out
}

// OpenNames are the logical names of the template's outputs, in order.
func (o Output) OpenNames() []string {
	out := make([]string, len(o.Files))
	for i, f := range o.Files {
		out[i] = f.OpenName
	}
	return out
}

// NumGiven is how many files a job of this template is given at
// submission.
func (in Input) NumGiven() int {
	n := 0
	for _, f := range in.Files {
		if f.Given() {
			n++
		}
	}
	return n
}

// boolElem is one of BOINC's flag elements: <x/> or <x>1</x> is true,
// <x>0</x> is false.
type boolElem bool

// UnmarshalXML reads the element's text.
func (e *boolElem) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	var s string
	if err := d.DecodeElement(&s, &start); err != nil {
		return err
	}
	s = strings.TrimSpace(s)
	*e = boolElem(s != "0" && s != "false")
	return nil
}

// inner is an element whose content may be markup (<OUTFILE_0/>).
type inner struct {
	XML string `xml:",innerxml"`
}

type inFileXML struct {
	Number       *int     `xml:"number"`
	PhysicalName string   `xml:"physical_name"`
	URLs         []string `xml:"url"`
	MD5          string   `xml:"md5_cksum"`
	Nbytes       float64  `xml:"nbytes"`
	Gzip         boolElem `xml:"gzip"`
	Sticky       boolElem `xml:"sticky"`
	NoDelete     boolElem `xml:"no_delete"`
	NoDelete2    boolElem `xml:"nodelete"`
}

type inRefXML struct {
	FileNumber *int     `xml:"file_number"`
	OpenName   string   `xml:"open_name"`
	CopyFile   boolElem `xml:"copy_file"`
}

type inWorkunitXML struct {
	FileRefs          []inRefXML `xml:"file_ref"`
	CommandLine       *string    `xml:"command_line"`
	RscFpopsEst       *float64   `xml:"rsc_fpops_est"`
	RscFpopsBound     *float64   `xml:"rsc_fpops_bound"`
	RscMemoryBound    *float64   `xml:"rsc_memory_bound"`
	RscDiskBound      *float64   `xml:"rsc_disk_bound"`
	DelayBound        *float64   `xml:"delay_bound"`
	MinQuorum         *int       `xml:"min_quorum"`
	TargetNResults    *int       `xml:"target_nresults"`
	MaxErrorResults   *int       `xml:"max_error_results"`
	MaxTotalResults   *int       `xml:"max_total_results"`
	MaxSuccessResults *int       `xml:"max_success_results"`
	Priority          *int       `xml:"priority"`
}

type inTemplateXML struct {
	Files    []inFileXML    `xml:"file_info"`
	Workunit *inWorkunitXML `xml:"workunit"`
}

// ParseInput reads an input template: BOINC's <input_template> document,
// or its content without that root.
func ParseInput(doc string) (Input, error) {
	var t inTemplateXML
	if err := unmarshal(doc, "input_template", &t); err != nil {
		return Input{}, fmt.Errorf("input template: %w", err)
	}
	if t.Workunit == nil {
		return Input{}, errors.New("input template: no <workunit> element")
	}
	if len(t.Workunit.FileRefs) != len(t.Files) {
		return Input{}, fmt.Errorf("input template: %d <file_info> but %d <file_ref>", len(t.Files), len(t.Workunit.FileRefs))
	}
	in := Input{Params: Params{
		RscFpopsEst: t.Workunit.RscFpopsEst, RscFpopsBound: t.Workunit.RscFpopsBound,
		RscMemoryBound: t.Workunit.RscMemoryBound, RscDiskBound: t.Workunit.RscDiskBound,
		DelayBound: t.Workunit.DelayBound, MinQuorum: t.Workunit.MinQuorum, TargetNResults: t.Workunit.TargetNResults,
		MaxErrorResults: t.Workunit.MaxErrorResults, MaxTotalResults: t.Workunit.MaxTotalResults,
		MaxSuccessResults: t.Workunit.MaxSuccessResults, Priority: t.Workunit.Priority,
	}}
	if t.Workunit.CommandLine != nil {
		in.CommandLine = strings.TrimSpace(*t.Workunit.CommandLine)
	}
	given := 0
	opens := map[string]bool{}
	for i, fx := range t.Files {
		f := InputFile{Number: given, PhysicalName: strings.TrimSpace(fx.PhysicalName), MD5: strings.TrimSpace(fx.MD5),
			Nbytes: fx.Nbytes, Gzip: bool(fx.Gzip), Sticky: bool(fx.Sticky), NoDelete: bool(fx.NoDelete || fx.NoDelete2)}
		if fx.Number != nil {
			f.Number = *fx.Number
		}
		for _, u := range fx.URLs {
			if u = strings.TrimSpace(u); u != "" {
				f.URLs = append(f.URLs, u)
			}
		}
		switch {
		case f.PhysicalName != "":
			f.Number = -1
			if err := fanout.ValidName(f.PhysicalName); err != nil {
				return Input{}, fmt.Errorf("input template: file %d: physical_name: %w", i, err)
			}
			if len(f.URLs) > 0 {
				return Input{}, fmt.Errorf("input template: file %d: both physical_name and url", i)
			}
		case len(f.URLs) > 0:
			f.Number = -1
			// BOINC: every property must be given for a remote file.
			if f.MD5 == "" || !(f.Nbytes > 0) {
				return Input{}, fmt.Errorf("input template: file %d: a file with a <url> needs <md5_cksum> and <nbytes>", i)
			}
			if f.Gzip {
				return Input{}, fmt.Errorf("input template: file %d: <gzip/> is for files staged here, not a <url>", i)
			}
		default:
			if f.Number != given {
				return Input{}, fmt.Errorf("input template: file %d: <number> %d, want %d (the files given in order)", i, f.Number, given)
			}
			given++
		}
		ref := t.Workunit.FileRefs[i]
		if ref.FileNumber != nil && *ref.FileNumber != f.Number && f.Given() {
			return Input{}, fmt.Errorf("input template: <file_ref> %d: file_number %d, want %d (file_refs in the order of the file_infos)", i, *ref.FileNumber, f.Number)
		}
		f.OpenName = strings.TrimSpace(ref.OpenName)
		f.CopyFile = bool(ref.CopyFile)
		if f.OpenName == "" {
			if !f.CopyFile {
				return Input{}, fmt.Errorf("input template: <file_ref> %d: no <open_name> and no <copy_file/>", i)
			}
			// BOINC opens a copied file by its own name, known only
			// when the file is.
		} else if err := fanout.ValidName(f.OpenName); err != nil {
			return Input{}, fmt.Errorf("input template: <file_ref> %d: open_name: %w", i, err)
		}
		if f.OpenName != "" && opens[f.OpenName] {
			return Input{}, fmt.Errorf("input template: open_name %q used twice", f.OpenName)
		}
		opens[f.OpenName] = true
		in.Files = append(in.Files, f)
	}
	return in, nil
}

// Resolved is an input file as it is at submission: its physical name and
// content description (the jobs package stages it or looks it up).
type Resolved struct {
	Name          string
	Nbytes        float64
	MD5           string
	GzippedNbytes float64
	URLs          []string
	// NoDelete is set for shared files, whatever the template says: they
	// are deleted by reference, not with one job.
	NoDelete bool
}

// Workunit makes a job's workunit document from the template and its
// files, one per template file in order. commandLine, if not empty,
// replaces the template's (BOINC refuses both; a job's own line is what the
// submitter means).
func (in Input) Workunit(files []Resolved, commandLine string) (jobxml.Workunit, error) {
	if len(files) != len(in.Files) {
		return jobxml.Workunit{}, fmt.Errorf("input template has %d files, %d given", len(in.Files), len(files))
	}
	w := jobxml.Workunit{CommandLine: in.CommandLine}
	if commandLine != "" {
		w.CommandLine = commandLine
	}
	for i, f := range in.Files {
		r := files[i]
		open := f.OpenName
		if open == "" {
			open = r.Name
		}
		w.Inputs = append(w.Inputs, jobxml.InputFile{Name: r.Name, OpenName: open, Nbytes: r.Nbytes, MD5: r.MD5,
			URLs: r.URLs, GzippedNbytes: r.GzippedNbytes, Sticky: f.Sticky, NoDelete: f.NoDelete || r.NoDelete,
			CopyFile: f.CopyFile})
	}
	if _, err := jobxml.FormatWorkunit(w); err != nil {
		return jobxml.Workunit{}, err
	}
	return w, nil
}

type outFileXML struct {
	Name      inner   `xml:"name"`
	MaxNbytes float64 `xml:"max_nbytes"`
}

type outRefXML struct {
	FileName   inner    `xml:"file_name"`
	OpenName   string   `xml:"open_name"`
	CopyFile   boolElem `xml:"copy_file"`
	Optional   boolElem `xml:"optional"`
	NoValidate boolElem `xml:"no_validate"`
}

type outTemplateXML struct {
	Files  []outFileXML `xml:"file_info"`
	Result *struct {
		FileRefs []outRefXML `xml:"file_ref"`
	} `xml:"result"`
}

var outfileMacro = regexp.MustCompile(`^<OUTFILE_([0-9]{1,4})\s*/>$|^<OUTFILE_([0-9]{1,4})>\s*</OUTFILE_[0-9]{1,4}>$`)

// outfileNumber reads <OUTFILE_n/> in a <name> or <file_name>.
func outfileNumber(s string) (int, bool) {
	m := outfileMacro.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	d := m[1]
	if d == "" {
		d = m[2]
	}
	n, err := strconv.Atoi(d)
	return n, err == nil
}

// ParseOutput reads an output template: BOINC's <output_template>
// document, or its content without that root. Every output needs a
// positive <max_nbytes>, a name <OUTFILE_n/>, and a <file_ref> with an
// open name.
func ParseOutput(doc string) (Output, error) {
	var t outTemplateXML
	if err := unmarshal(doc, "output_template", &t); err != nil {
		return Output{}, fmt.Errorf("output template: %w", err)
	}
	if t.Result == nil {
		return Output{}, errors.New("output template: no <result> element")
	}
	if len(t.Files) == 0 {
		return Output{}, errors.New("output template: no <file_info>: an instance with no output cannot be checked")
	}
	byNum := map[int]int{} // <OUTFILE_n/> to its index in out.Files
	var out Output
	for i, fx := range t.Files {
		n, ok := outfileNumber(fx.Name.XML)
		if !ok {
			return Output{}, fmt.Errorf("output template: file %d: <name> %q, want <OUTFILE_n/>", i, strings.TrimSpace(fx.Name.XML))
		}
		if _, dup := byNum[n]; dup {
			return Output{}, fmt.Errorf("output template: <OUTFILE_%d/> named twice", n)
		}
		if !(fx.MaxNbytes > 0) {
			return Output{}, fmt.Errorf("output template: <OUTFILE_%d/>: no <max_nbytes> (every output needs a size limit)", n)
		}
		byNum[n] = len(out.Files)
		out.Files = append(out.Files, OutputFile{Number: n, MaxNbytes: fx.MaxNbytes})
	}
	seen := map[int]bool{}
	opens := map[string]bool{}
	for i, rx := range t.Result.FileRefs {
		n, ok := outfileNumber(rx.FileName.XML)
		if !ok {
			return Output{}, fmt.Errorf("output template: <file_ref> %d: <file_name> %q, want <OUTFILE_n/>", i, strings.TrimSpace(rx.FileName.XML))
		}
		idx, ok := byNum[n]
		if !ok {
			return Output{}, fmt.Errorf("output template: <file_ref> to <OUTFILE_%d/>, which no <file_info> describes", n)
		}
		if seen[n] {
			return Output{}, fmt.Errorf("output template: two <file_ref> to <OUTFILE_%d/>", n)
		}
		seen[n] = true
		f := &out.Files[idx]
		f.OpenName = strings.TrimSpace(rx.OpenName)
		if err := fanout.ValidName(f.OpenName); err != nil {
			return Output{}, fmt.Errorf("output template: <OUTFILE_%d/>: open_name: %w", n, err)
		}
		if opens[f.OpenName] {
			return Output{}, fmt.Errorf("output template: open_name %q used twice", f.OpenName)
		}
		opens[f.OpenName] = true
		f.CopyFile, f.Optional, f.NoValidate = bool(rx.CopyFile), bool(rx.Optional), bool(rx.NoValidate)
	}
	for _, f := range out.Files {
		if !seen[f.Number] {
			return Output{}, fmt.Errorf("output template: <OUTFILE_%d/> has no <file_ref> in <result>", f.Number)
		}
	}
	return out, nil
}

// unmarshal reads doc, with or without its root element named root.
func unmarshal(doc, root string, v any) error {
	doc = strings.TrimSpace(doc)
	if doc == "" {
		return errors.New("empty")
	}
	// Strip an XML declaration and the root, so both forms read alike.
	if strings.HasPrefix(doc, "<?xml") {
		if i := strings.Index(doc, "?>"); i >= 0 {
			doc = strings.TrimSpace(doc[i+2:])
		}
	}
	if strings.HasPrefix(doc, "<"+root+">") && strings.HasSuffix(doc, "</"+root+">") {
		doc = doc[len(root)+2 : len(doc)-len(root)-3]
	}
	return xml.Unmarshal([]byte("<doc>"+doc+"</doc>"), v)
}
