// Package jobxml reads and writes the two XML documents stored with a job,
// in BOINC's own form: workunit.xml_doc (the job's input files and command
// line: <file_info> elements, then <workunit> with a <file_ref> per input)
// and result.xml_doc_in (an instance's output files: <file_info> elements,
// then <result> with a <file_ref> per output). Package jobtemplate makes
// them from BOINC's input and output templates. They are the contract
// between the programs that create jobs, send them, check them and delete
// their files.
//
// Documents written before version 5 of the schema (a single <workunit> or
// <result> root holding <file_info> elements with their <open_name>) are
// still read: their files are copied into the slot (copy_file), as they
// were sent then.
package jobxml

import (
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
)

// InputFile is one input file of a job.
type InputFile struct {
	// Name is the file's physical name: in the download directory, on
	// the host, and in the workunit's <file_ref>.
	Name string
	// OpenName is the logical name the application opens (resolves).
	OpenName string
	Nbytes   float64
	MD5      string
	// URLs, when not empty, are where the file is downloaded from (a file
	// kept on another server); empty means the project's download
	// directory.
	URLs []string
	// GzippedNbytes > 0 means a gzip'd copy, Name + ".gz", of that size is
	// staged beside the file, and the client is offered it.
	GzippedNbytes float64
	// Sticky files stay on the host after the job (BOINC's <sticky/>).
	Sticky bool
	// NoDelete files are not deleted with the job (BOINC's <no_delete/>):
	// shared files, and files the project manages itself.
	NoDelete bool
	// CopyFile copies the file into the slot directory instead of linking
	// it (BOINC's <copy_file/>), for applications that do not resolve
	// logical names.
	CopyFile bool
}

// OutputFile is one output file of an instance, uploaded to the upload
// directory.
type OutputFile struct {
	// Name is the physical name: <instance name>_<index>.
	Name string
	// OpenName is the logical name the application writes.
	OpenName  string
	MaxNbytes float64
	// Optional outputs may be missing from a successful result.
	Optional bool
	// NoValidate outputs are not compared by the validator.
	NoValidate bool
	// CopyFile copies the file out of the slot directory.
	CopyFile bool
}

// Workunit is the parsed workunit.xml_doc.
type Workunit struct {
	CommandLine string
	Inputs      []InputFile
}

// FormatWorkunit writes workunit.xml_doc in the canonical form (see
// parseWorkunitFast).
func FormatWorkunit(w Workunit) (string, error) {
	if err := checkInputs(w.Inputs); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range w.Inputs {
		b.WriteString("<file_info>")
		elem(&b, "name", f.Name)
		for _, u := range f.URLs {
			elem(&b, "url", u)
		}
		elem(&b, "md5_cksum", f.MD5)
		num(&b, "nbytes", f.Nbytes)
		if f.GzippedNbytes > 0 {
			num(&b, "gzipped_nbytes", f.GzippedNbytes)
		}
		flag(&b, "sticky", f.Sticky)
		flag(&b, "no_delete", f.NoDelete)
		b.WriteString("</file_info>")
	}
	b.WriteString("<workunit>")
	if w.CommandLine != "" {
		elem(&b, "command_line", w.CommandLine)
	}
	for _, f := range w.Inputs {
		b.WriteString("<file_ref>")
		elem(&b, "file_name", f.Name)
		elem(&b, "open_name", f.OpenName)
		flag(&b, "copy_file", f.CopyFile)
		b.WriteString("</file_ref>")
	}
	b.WriteString("</workunit>")
	return b.String(), nil
}

// checkInputs refuses names that are not plain file names, a file named
// twice, and a logical name used twice.
func checkInputs(in []InputFile) error {
	names := make(map[string]bool, len(in))
	opens := make(map[string]bool, len(in))
	for _, f := range in {
		if err := fanout.ValidName(f.Name); err != nil {
			return fmt.Errorf("input file: %w", err)
		}
		if err := fanout.ValidName(f.OpenName); err != nil {
			return fmt.Errorf("input file %q: open name: %w", f.Name, err)
		}
		if names[f.Name] {
			return fmt.Errorf("input file %q: named twice", f.Name)
		}
		if opens[f.OpenName] {
			return fmt.Errorf("input file %q: open name %q used twice", f.Name, f.OpenName)
		}
		names[f.Name], opens[f.OpenName] = true, true
	}
	return nil
}

// ParseWorkunit reads workunit.xml_doc; an empty document has no inputs.
func ParseWorkunit(doc string) (Workunit, error) {
	if strings.TrimSpace(doc) == "" {
		return Workunit{}, nil
	}
	w, ok := parseWorkunitFast(doc)
	if !ok {
		var err error
		if w, err = parseWorkunitXML(doc); err != nil {
			return Workunit{}, err
		}
	}
	if err := checkInputs(w.Inputs); err != nil {
		return Workunit{}, fmt.Errorf("workunit xml: %w", err)
	}
	return w, nil
}

// OutputName is the name of output file i of the instance called result.
func OutputName(result string, i int) string { return result + "_" + strconv.Itoa(i) }

// FormatResult writes result.xml_doc_in for an instance's output files, in
// the canonical form (see parseResultFast).
func FormatResult(outs []OutputFile) (string, error) {
	if err := checkOutputs(outs); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range outs {
		b.WriteString("<file_info>")
		elem(&b, "name", f.Name)
		b.WriteString("<generated_locally/><upload_when_present/>")
		num(&b, "max_nbytes", f.MaxNbytes)
		b.WriteString("</file_info>")
	}
	b.WriteString("<result>")
	for _, f := range outs {
		b.WriteString("<file_ref>")
		elem(&b, "file_name", f.Name)
		elem(&b, "open_name", f.OpenName)
		flag(&b, "copy_file", f.CopyFile)
		flag(&b, "optional", f.Optional)
		flag(&b, "no_validate", f.NoValidate)
		b.WriteString("</file_ref>")
	}
	b.WriteString("</result>")
	return b.String(), nil
}

// checkOutputs refuses names that are not plain file names, a name or a
// logical name used twice, and an output without a positive size limit.
func checkOutputs(outs []OutputFile) error {
	names := make(map[string]bool, len(outs))
	opens := make(map[string]bool, len(outs))
	for _, f := range outs {
		if err := fanout.ValidName(f.Name); err != nil {
			return fmt.Errorf("output file: %w", err)
		}
		if err := fanout.ValidName(f.OpenName); err != nil {
			return fmt.Errorf("output file %q: open name: %w", f.Name, err)
		}
		if !(f.MaxNbytes > 0) {
			return fmt.Errorf("output file %q: max_nbytes %g: want > 0", f.Name, f.MaxNbytes)
		}
		if names[f.Name] {
			return fmt.Errorf("output file %q: named twice", f.Name)
		}
		if opens[f.OpenName] {
			return fmt.Errorf("output file %q: open name %q used twice", f.Name, f.OpenName)
		}
		names[f.Name], opens[f.OpenName] = true, true
	}
	return nil
}

// ParseResult reads result.xml_doc_in and returns the output files.
func ParseResult(doc string) ([]OutputFile, error) {
	if strings.TrimSpace(doc) == "" {
		return nil, nil
	}
	outs, ok := parseResultFast(doc)
	if !ok {
		var err error
		if outs, err = parseResultXML(doc); err != nil {
			return nil, err
		}
	}
	for _, f := range outs {
		if err := fanout.ValidName(f.Name); err != nil {
			return nil, fmt.Errorf("result xml output: %w", err)
		}
	}
	return outs, nil
}

// Writing the canonical form.

func elem(b *strings.Builder, name, text string) {
	b.WriteString("<" + name + ">")
	_ = xml.EscapeText(b, []byte(text)) // a strings.Builder does not fail
	b.WriteString("</" + name + ">")
}

func num(b *strings.Builder, name string, v float64) {
	b.WriteString("<" + name + ">")
	b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	b.WriteString("</" + name + ">")
}

func flag(b *strings.Builder, name string, on bool) {
	if on {
		b.WriteString("<" + name + "/>")
	}
}

// Reading any form through encoding/xml.

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

type fileInfoXML struct {
	Name          string   `xml:"name"`
	OpenName      string   `xml:"open_name"` // before version 5 only
	URLs          []string `xml:"url"`
	MD5           string   `xml:"md5_cksum"`
	Nbytes        float64  `xml:"nbytes"`
	GzippedNbytes float64  `xml:"gzipped_nbytes"`
	MaxNbytes     float64  `xml:"max_nbytes"`
	Sticky        boolElem `xml:"sticky"`
	NoDelete      boolElem `xml:"no_delete"`
}

type fileRefXML struct {
	FileName   string   `xml:"file_name"`
	OpenName   string   `xml:"open_name"`
	CopyFile   boolElem `xml:"copy_file"`
	Optional   boolElem `xml:"optional"`
	NoValidate boolElem `xml:"no_validate"`
}

type sectionXML struct {
	CommandLine string        `xml:"command_line"`
	FileRefs    []fileRefXML  `xml:"file_ref"`
	Files       []fileInfoXML `xml:"file_info"` // before version 5 only
}

type docXML struct {
	Files    []fileInfoXML `xml:"file_info"`
	Workunit *sectionXML   `xml:"workunit"`
	Result   *sectionXML   `xml:"result"`
}

// parseDoc reads a document of top-level elements.
func parseDoc(doc string) (docXML, error) {
	var d docXML
	err := xml.Unmarshal([]byte("<doc>"+doc+"</doc>"), &d)
	return d, err
}

func parseWorkunitXML(doc string) (Workunit, error) {
	d, err := parseDoc(doc)
	if err != nil {
		return Workunit{}, fmt.Errorf("parse workunit xml: %w", err)
	}
	if d.Workunit == nil {
		return Workunit{}, errors.New("parse workunit xml: no <workunit> element")
	}
	w := Workunit{CommandLine: strings.TrimSpace(d.Workunit.CommandLine)}
	if len(d.Files) == 0 && len(d.Workunit.FileRefs) == 0 {
		// Before version 5: <workunit><file_info> with its open name.
		for _, f := range d.Workunit.Files {
			w.Inputs = append(w.Inputs, InputFile{Name: f.Name, OpenName: f.OpenName, Nbytes: f.Nbytes, MD5: f.MD5, CopyFile: true})
		}
		return w, nil
	}
	infos := make(map[string]fileInfoXML, len(d.Files))
	for _, f := range d.Files {
		infos[f.Name] = f
	}
	for _, ref := range d.Workunit.FileRefs {
		f, ok := infos[ref.FileName]
		if !ok {
			return Workunit{}, fmt.Errorf("parse workunit xml: <file_ref> to %q has no <file_info>", ref.FileName)
		}
		open := ref.OpenName
		if open == "" {
			open = ref.FileName // BOINC: copy_file without an open name
		}
		w.Inputs = append(w.Inputs, InputFile{Name: f.Name, OpenName: open, Nbytes: f.Nbytes, MD5: f.MD5, URLs: f.URLs,
			GzippedNbytes: f.GzippedNbytes, Sticky: bool(f.Sticky), NoDelete: bool(f.NoDelete), CopyFile: bool(ref.CopyFile)})
	}
	if len(w.Inputs) != len(d.Files) {
		return Workunit{}, fmt.Errorf("parse workunit xml: %d <file_info> but %d <file_ref>", len(d.Files), len(w.Inputs))
	}
	return w, nil
}

func parseResultXML(doc string) ([]OutputFile, error) {
	d, err := parseDoc(doc)
	if err != nil {
		return nil, fmt.Errorf("parse result xml: %w", err)
	}
	if d.Result == nil {
		return nil, errors.New("parse result xml: no <result> element")
	}
	var outs []OutputFile
	if len(d.Files) == 0 && len(d.Result.FileRefs) == 0 {
		// Before version 5: <result><file_info> with its open name.
		for _, f := range d.Result.Files {
			outs = append(outs, OutputFile{Name: f.Name, OpenName: f.OpenName, MaxNbytes: f.MaxNbytes, CopyFile: true})
		}
		return outs, nil
	}
	infos := make(map[string]fileInfoXML, len(d.Files))
	for _, f := range d.Files {
		infos[f.Name] = f
	}
	for _, ref := range d.Result.FileRefs {
		f, ok := infos[ref.FileName]
		if !ok {
			return nil, fmt.Errorf("parse result xml: <file_ref> to %q has no <file_info>", ref.FileName)
		}
		open := ref.OpenName
		if open == "" {
			open = ref.FileName
		}
		outs = append(outs, OutputFile{Name: f.Name, OpenName: open, MaxNbytes: f.MaxNbytes,
			Optional: bool(ref.Optional), NoValidate: bool(ref.NoValidate), CopyFile: bool(ref.CopyFile)})
	}
	if len(outs) != len(d.Files) {
		return nil, fmt.Errorf("parse result xml: %d <file_info> but %d <file_ref>", len(d.Files), len(outs))
	}
	return outs, nil
}
