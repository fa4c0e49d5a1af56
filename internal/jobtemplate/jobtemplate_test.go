package jobtemplate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
)

// boincInput is an input template as BOINC's documentation writes one:
// three files (one shared by name and sticky, one gzip'd), a command line
// and parameters.
const boincInput = `<?xml version="1.0"?>
<input_template>
<file_info>
    <number>0</number>
</file_info>
<file_info>
    <physical_name>model_v3</physical_name>
    <sticky/>
    <no_delete/>
</file_info>
<file_info>
    <number>1</number>
    <gzip/>
</file_info>
<workunit>
    <file_ref>
        <file_number>0</file_number>
        <open_name>in</open_name>
        <copy_file/>
    </file_ref>
    <file_ref>
        <open_name>model</open_name>
    </file_ref>
    <file_ref>
        <file_number>1</file_number>
        <open_name>params</open_name>
    </file_ref>
    <command_line>-rounds 3</command_line>
    <rsc_fpops_est>1e13</rsc_fpops_est>
    <delay_bound>86400</delay_bound>
    <min_quorum>2</min_quorum>
    <target_nresults>2</target_nresults>
</workunit>
</input_template>`

const boincOutput = `<output_template>
<file_info>
    <name><OUTFILE_0/></name>
    <generated_locally/>
    <upload_when_present/>
    <max_nbytes>65536</max_nbytes>
    <url><UPLOAD_URL/></url>
</file_info>
<file_info>
    <name><OUTFILE_1/></name>
    <generated_locally/>
    <upload_when_present/>
    <max_nbytes>1000000</max_nbytes>
    <url><UPLOAD_URL/></url>
</file_info>
<result>
    <file_ref>
        <file_name><OUTFILE_0/></file_name>
        <open_name>out</open_name>
    </file_ref>
    <file_ref>
        <file_name><OUTFILE_1/></file_name>
        <open_name>log</open_name>
        <optional>1</optional>
        <no_validate/>
    </file_ref>
</result>
</output_template>`

func TestParseInput(t *testing.T) {
	t.Parallel()
	in, err := ParseInput(boincInput)
	if err != nil {
		t.Fatal(err)
	}
	if in.NumGiven() != 2 || in.CommandLine != "-rounds 3" || *in.Params.RscFpopsEst != 1e13 || *in.Params.DelayBound != 86400 ||
		*in.Params.MinQuorum != 2 || in.Params.MaxTotalResults != nil {
		t.Fatalf("ParseInput = %+v", in)
	}
	want := []InputFile{
		{Number: 0, OpenName: "in", CopyFile: true},
		{Number: -1, PhysicalName: "model_v3", Sticky: true, NoDelete: true, OpenName: "model"},
		{Number: 1, Gzip: true, OpenName: "params"},
	}
	if !reflect.DeepEqual(in.Files, want) {
		t.Fatalf("files %+v, want %+v", in.Files, want)
	}
	w, err := in.Workunit([]Resolved{
		{Name: "job_in", Nbytes: 10, MD5: "a"},
		{Name: "model_v3", Nbytes: 1e6, MD5: "b", NoDelete: true},
		{Name: "job_params", Nbytes: 100, MD5: "c", GzippedNbytes: 50},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	wantW := jobxml.Workunit{CommandLine: "-rounds 3", Inputs: []jobxml.InputFile{
		{Name: "job_in", OpenName: "in", Nbytes: 10, MD5: "a", CopyFile: true},
		{Name: "model_v3", OpenName: "model", Nbytes: 1e6, MD5: "b", Sticky: true, NoDelete: true},
		{Name: "job_params", OpenName: "params", Nbytes: 100, MD5: "c", GzippedNbytes: 50},
	}}
	if !reflect.DeepEqual(w, wantW) {
		t.Fatalf("Workunit = %+v, want %+v", w, wantW)
	}
	if w, _ := in.Workunit([]Resolved{{Name: "a"}, {Name: "b"}, {Name: "c"}}, "--own"); w.CommandLine != "--own" {
		t.Errorf("a job's command line did not replace the template's: %q", w.CommandLine)
	}
	if _, err := in.Workunit([]Resolved{{Name: "a"}}, ""); err == nil {
		t.Error("Workunit accepted too few files")
	}
	if _, err := in.Workunit([]Resolved{{Name: "a"}, {Name: "../b"}, {Name: "c"}}, ""); err == nil {
		t.Error("Workunit accepted ../b")
	}
}

func TestParseInputRefusesBadTemplates(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"no workunit":          `<input_template><file_info/></input_template>`,
		"file without ref":     `<file_info/><workunit></workunit>`,
		"no open name":         `<file_info/><workunit><file_ref><file_number>0</file_number></file_ref></workunit>`,
		"path in open name":    `<file_info/><workunit><file_ref><open_name>../in</open_name></file_ref></workunit>`,
		"path in physical":     `<file_info><physical_name>../x</physical_name></file_info><workunit><file_ref><open_name>in</open_name></file_ref></workunit>`,
		"open name twice":      `<file_info/><file_info/><workunit><file_ref><open_name>in</open_name></file_ref><file_ref><open_name>in</open_name></file_ref></workunit>`,
		"numbers out of order": `<file_info><number>1</number></file_info><workunit><file_ref><open_name>in</open_name></file_ref></workunit>`,
		"url without md5":      `<file_info><url>http://x/y</url><nbytes>3</nbytes></file_info><workunit><file_ref><open_name>in</open_name></file_ref></workunit>`,
		"not xml":              `<file_info>`,
		"empty":                ``,
	} {
		if _, err := ParseInput(doc); err == nil {
			t.Errorf("%s: ParseInput accepted %s", name, doc)
		}
	}
}

func TestParseOutput(t *testing.T) {
	t.Parallel()
	out, err := ParseOutput(boincOutput)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Outputs("job_1_0")
	want := []jobxml.OutputFile{
		{Name: "job_1_0_0", OpenName: "out", MaxNbytes: 65536},
		{Name: "job_1_0_1", OpenName: "log", MaxNbytes: 1e6, Optional: true, NoValidate: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Outputs = %+v, want %+v", got, want)
	}
	if _, err := jobxml.FormatResult(got); err != nil {
		t.Fatal(err)
	}
}

func TestParseOutputRefusesBadTemplates(t *testing.T) {
	t.Parallel()
	ok := `<file_info><name><OUTFILE_0/></name><max_nbytes>10</max_nbytes></file_info><result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result>`
	if _, err := ParseOutput(ok); err != nil {
		t.Fatalf("ParseOutput refused %s: %v", ok, err)
	}
	for name, doc := range map[string]string{
		"no size limit":     strings.Replace(ok, "<max_nbytes>10</max_nbytes>", "", 1),
		"zero size limit":   strings.Replace(ok, "10", "0", 1),
		"no result":         `<file_info><name><OUTFILE_0/></name><max_nbytes>10</max_nbytes></file_info>`,
		"no outputs":        `<result></result>`,
		"literal name":      strings.Replace(ok, "<name><OUTFILE_0/></name>", "<name>out.txt</name>", 1),
		"ref to nothing":    strings.Replace(ok, "<file_name><OUTFILE_0/>", "<file_name><OUTFILE_1/>", 1),
		"no ref":            strings.Replace(ok, "<result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result>", "<result></result>", 1),
		"path in open name": strings.Replace(ok, ">out<", ">../out<", 1),
		"empty open name":   strings.Replace(ok, "<open_name>out</open_name>", "", 1),
	} {
		if _, err := ParseOutput(doc); err == nil {
			t.Errorf("%s: ParseOutput accepted %s", name, doc)
		}
	}
}
