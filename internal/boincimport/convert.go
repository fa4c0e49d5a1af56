package boincimport

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
)

// The documents BOINC stores with app versions, jobs and instances, turned
// into ours. Pure functions: no database, no files.

// boincVersionDoc is app_version.xml_doc as BOINC's update_versions writes
// it: a <file_info> per file, then <app_version> with a <file_ref> per file.
type boincVersionDoc struct {
	Files []struct {
		Name      string  `xml:"name"`
		Nbytes    float64 `xml:"nbytes"`
		MD5       string  `xml:"md5_cksum"`
		Signature string  `xml:"file_signature"`
	} `xml:"file_info"`
	Version *struct {
		Cmdline string `xml:"cmdline"`
		Refs    []struct {
			FileName    string    `xml:"file_name"`
			OpenName    string    `xml:"open_name"`
			MainProgram *struct{} `xml:"main_program"`
			CopyFile    *struct{} `xml:"copy_file"`
		} `xml:"file_ref"`
	} `xml:"app_version"`
}

// VersionFile is what the import needs to know of an app version's file
// that BOINC's document may lack: its md5 and size, read from the file.
type VersionFile func(name string) (md5 string, nbytes float64, err error)

// ConvertAppVersion turns BOINC's app_version.xml_doc into ours, keeping
// each file's name and code signature as they are, so that clients holding
// the project's code-signing key accept the files, and clients that have
// them do not fetch them again. BOINC's document gives no md5 (the
// signature stands for it); readFile supplies it, and is called only for
// files whose document lacks it. It returns the document and the names of
// the version's files.
func ConvertAppVersion(doc string, readFile VersionFile) (string, []string, error) {
	var d boincVersionDoc
	if err := xml.Unmarshal([]byte("<doc>"+doc+"</doc>"), &d); err != nil {
		return "", nil, fmt.Errorf("parse app version xml_doc: %w", err)
	}
	if d.Version == nil {
		return "", nil, fmt.Errorf("app version xml_doc has no <app_version> element")
	}
	v := appversion.Version{Cmdline: strings.TrimSpace(d.Version.Cmdline)}
	var names []string
	for _, ref := range d.Version.Refs {
		name := strings.TrimSpace(ref.FileName)
		found := false
		for _, fi := range d.Files {
			if strings.TrimSpace(fi.Name) != name {
				continue
			}
			found = true
			f := appversion.File{Name: name, Nbytes: fi.Nbytes, MD5: strings.ToLower(strings.TrimSpace(fi.MD5)),
				Signature: strings.TrimSpace(fi.Signature) + "\n", MainProgram: ref.MainProgram != nil,
				OpenName: strings.TrimSpace(ref.OpenName), CopyFile: ref.CopyFile != nil}
			if strings.TrimSpace(fi.Signature) == "" {
				return "", nil, fmt.Errorf("file %s has no <file_signature>: the client runs no unsigned file", name)
			}
			if f.MD5 == "" {
				sum, n, err := readFile(name)
				if err != nil {
					return "", nil, fmt.Errorf("file %s: the document gives no md5_cksum, and reading the file failed: %w", name, err)
				}
				if f.Nbytes != 0 && f.Nbytes != n {
					return "", nil, fmt.Errorf("file %s: the document says %g bytes, the file has %g", name, f.Nbytes, n)
				}
				f.MD5, f.Nbytes = sum, n
			}
			v.Files = append(v.Files, f)
			names = append(names, name)
		}
		if !found {
			return "", nil, fmt.Errorf("<file_ref> to %q has no <file_info>", name)
		}
	}
	out, err := appversion.Format(v)
	if err != nil {
		return "", nil, err
	}
	return out, names, nil
}

// ConvertWorkunit turns BOINC's workunit.xml_doc into ours. An input whose
// URL is the old project's download URL with the file's fan-out directory
// (as ours places it: the same as BOINC's for a power-of-two fan-out)
// becomes a file of our download directory, served by our data server;
// any other URL stays, as a file kept on another server. oldDownloadURL ""
// keeps every URL.
func ConvertWorkunit(doc, oldDownloadURL string, fan int) (string, error) {
	w, err := jobxml.ParseWorkunit(doc)
	if err != nil {
		return "", err
	}
	base := strings.TrimRight(oldDownloadURL, "/")
	for i, f := range w.Inputs {
		if base != "" && len(f.URLs) > 0 && f.URLs[0] == base+"/"+fanout.Dir(f.Name, fan)+"/"+f.Name {
			w.Inputs[i].URLs = nil
		}
	}
	return jobxml.FormatWorkunit(w)
}

// ConvertResult turns BOINC's result.xml_doc_in into ours, and returns the
// output template it implies: BOINC names the outputs of instance R R_0,
// R_1, ... (<OUTFILE_n/>), and the transitioner makes any further instance
// of the job from that template. The upload certificates BOINC stored are
// dropped: ours are signed when an instance is sent, and a client holding
// the instance already has BOINC's, which our data server accepts when the
// old upload key is ours.
func ConvertResult(name, doc string) (string, jobtemplate.Output, error) {
	outs, err := jobxml.ParseResult(doc)
	if err != nil {
		return "", jobtemplate.Output{}, err
	}
	if len(outs) == 0 {
		return "", jobtemplate.Output{}, fmt.Errorf("instance %s: no output files", name)
	}
	var t jobtemplate.Output
	for _, o := range outs {
		n, ok := strings.CutPrefix(o.Name, name+"_")
		num, err := strconv.Atoi(n)
		if !ok || err != nil || num < 0 || strconv.Itoa(num) != n {
			return "", jobtemplate.Output{}, fmt.Errorf("instance %s: output %q is not named %s_<n>", name, o.Name, name)
		}
		t.Files = append(t.Files, jobtemplate.OutputFile{Number: num, MaxNbytes: o.MaxNbytes, OpenName: o.OpenName, CopyFile: o.CopyFile,
			Optional: o.Optional, NoValidate: o.NoValidate})
	}
	out, err := jobxml.FormatResult(outs)
	if err != nil {
		return "", jobtemplate.Output{}, fmt.Errorf("instance %s: %w", name, err)
	}
	return out, t, nil
}

// FormatOutputTemplate writes t as BOINC's output template document, the
// form job_template keeps and jobtemplate.ParseOutput reads.
func FormatOutputTemplate(t jobtemplate.Output) (string, error) {
	var b strings.Builder
	b.WriteString("<output_template>\n")
	for _, f := range t.Files {
		fmt.Fprintf(&b, "<file_info>\n    <name><OUTFILE_%d/></name>\n    <generated_locally/>\n    <upload_when_present/>\n"+
			"    <max_nbytes>%s</max_nbytes>\n    <url><UPLOAD_URL/></url>\n</file_info>\n", f.Number, strconv.FormatFloat(f.MaxNbytes, 'f', -1, 64))
	}
	b.WriteString("<result>\n")
	for _, f := range t.Files {
		var open strings.Builder
		_ = xml.EscapeText(&open, []byte(f.OpenName))
		fmt.Fprintf(&b, "    <file_ref>\n        <file_name><OUTFILE_%d/></file_name>\n        <open_name>%s</open_name>\n", f.Number, open.String())
		for _, fl := range []struct {
			on   bool
			name string
		}{{f.CopyFile, "copy_file"}, {f.Optional, "optional"}, {f.NoValidate, "no_validate"}} {
			if fl.on {
				b.WriteString("        <" + fl.name + "/>\n")
			}
		}
		b.WriteString("    </file_ref>\n")
	}
	b.WriteString("</result>\n</output_template>\n")
	body := b.String()
	if _, err := jobtemplate.ParseOutput(body); err != nil {
		return "", err
	}
	return body, nil
}
