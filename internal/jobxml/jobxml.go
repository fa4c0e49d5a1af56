// Package jobxml reads and writes the two XML documents stored with a job:
// workunit.xml_doc (the job's input files) and result.xml_doc_in (an
// instance's output files). They are the contract between the programs that
// create jobs, send them, check them and delete their files.
package jobxml

import (
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
)

// InputFile is one input file of a job, stored in the download directory.
type InputFile struct {
	Name     string  `xml:"name"`
	OpenName string  `xml:"open_name"`
	Nbytes   float64 `xml:"nbytes"`
	MD5      string  `xml:"md5_cksum"`
}

// OutputFile is one output file of an instance, uploaded to the upload
// directory.
type OutputFile struct {
	Name      string  `xml:"name"`
	OpenName  string  `xml:"open_name"`
	MaxNbytes float64 `xml:"max_nbytes"`
}

type workunitDoc struct {
	XMLName     xml.Name    `xml:"workunit"`
	CommandLine string      `xml:"command_line,omitempty"`
	Inputs      []InputFile `xml:"file_info"`
}

type resultDoc struct {
	XMLName xml.Name     `xml:"result"`
	Outputs []OutputFile `xml:"file_info"`
}

// Workunit is the parsed workunit.xml_doc.
type Workunit struct {
	CommandLine string
	Inputs      []InputFile
}

// FormatWorkunit writes workunit.xml_doc.
func FormatWorkunit(w Workunit) (string, error) {
	for _, f := range w.Inputs {
		if err := fanout.ValidName(f.Name); err != nil {
			return "", fmt.Errorf("input file: %w", err)
		}
	}
	b, err := xml.Marshal(workunitDoc{CommandLine: w.CommandLine, Inputs: w.Inputs})
	if err != nil {
		return "", fmt.Errorf("format workunit xml: %w", err)
	}
	return string(b), nil
}

// ParseWorkunit reads workunit.xml_doc; an empty document has no inputs.
func ParseWorkunit(doc string) (Workunit, error) {
	if strings.TrimSpace(doc) == "" {
		return Workunit{}, nil
	}
	d, ok := parseWorkunitFast(doc)
	if !ok {
		d = workunitDoc{}
		if err := xml.Unmarshal([]byte(doc), &d); err != nil {
			return Workunit{}, fmt.Errorf("parse workunit xml: %w", err)
		}
	}
	for _, f := range d.Inputs {
		if err := fanout.ValidName(f.Name); err != nil {
			return Workunit{}, fmt.Errorf("workunit xml input: %w", err)
		}
	}
	return Workunit{CommandLine: d.CommandLine, Inputs: d.Inputs}, nil
}

// OutputName is the name of output file i of the instance called result.
func OutputName(result string, i int) string { return fmt.Sprintf("%s_%d", result, i) }

// FormatResult writes result.xml_doc_in for an instance called name with
// n output files of at most maxNbytes bytes each.
func FormatResult(name string, openNames []string, maxNbytes float64) (string, error) {
	d := resultDoc{}
	for i, open := range openNames {
		f := OutputFile{Name: OutputName(name, i), OpenName: open, MaxNbytes: maxNbytes}
		if err := fanout.ValidName(f.Name); err != nil {
			return "", fmt.Errorf("output file: %w", err)
		}
		d.Outputs = append(d.Outputs, f)
	}
	b, err := xml.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("format result xml: %w", err)
	}
	return string(b), nil
}

// ParseResult reads result.xml_doc_in and returns the output files.
func ParseResult(doc string) ([]OutputFile, error) {
	if strings.TrimSpace(doc) == "" {
		return nil, nil
	}
	var d resultDoc
	var ok bool
	if d.Outputs, ok = parseResultFast(doc); !ok {
		d = resultDoc{}
		if err := xml.Unmarshal([]byte(doc), &d); err != nil {
			return nil, fmt.Errorf("parse result xml: %w", err)
		}
	}
	for _, f := range d.Outputs {
		if err := fanout.ValidName(f.Name); err != nil {
			return nil, fmt.Errorf("result xml output: %w", err)
		}
	}
	return d.Outputs, nil
}
