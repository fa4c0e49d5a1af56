package jobxml

import (
	"reflect"
	"strings"
	"testing"
)

func TestWorkunitRoundTrip(t *testing.T) {
	t.Parallel()
	in := Workunit{CommandLine: "--rounds 10", Inputs: []InputFile{
		{Name: "wu_1_in", OpenName: "in", Nbytes: 4096, MD5: "abc", CopyFile: true},
		{Name: "shared_db", OpenName: "db", Nbytes: 1e6, MD5: "def", Sticky: true, NoDelete: true, GzippedNbytes: 1000},
		{Name: "remote", OpenName: "r", Nbytes: 5, MD5: "ghi", URLs: []string{"https://example.org/r"}},
	}}
	doc, err := FormatWorkunit(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseWorkunit(doc)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("ParseWorkunit(FormatWorkunit(%+v)) = %+v, %v", in, out, err)
	}
	for _, bad := range []Workunit{
		{Inputs: []InputFile{{Name: "../x", OpenName: "in"}}},
		{Inputs: []InputFile{{Name: "x", OpenName: "../in"}}},
		{Inputs: []InputFile{{Name: "x", OpenName: "in"}, {Name: "x", OpenName: "in2"}}},
		{Inputs: []InputFile{{Name: "x", OpenName: "in"}, {Name: "y", OpenName: "in"}}},
	} {
		if _, err := FormatWorkunit(bad); err == nil {
			t.Errorf("FormatWorkunit accepted %+v", bad)
		}
	}
	for _, bad := range []string{
		`<workunit><file_info><name>../../etc/passwd</name><open_name>in</open_name></file_info></workunit>`,
		`<file_info><name>../x</name></file_info><workunit><file_ref><file_name>../x</file_name><open_name>in</open_name></file_ref></workunit>`,
		`<file_info><name>a</name></file_info><workunit><file_ref><file_name>b</file_name><open_name>in</open_name></file_ref></workunit>`,
		`<file_info><name>a</name></file_info><workunit></workunit>`,
		`<file_info><name>a</name></file_info>`,
	} {
		if _, err := ParseWorkunit(bad); err == nil {
			t.Errorf("ParseWorkunit accepted %s", bad)
		}
	}
}

// TestWorkunitAsBOINCWritesIt reads a document as BOINC's create_work
// writes it: newlines, the command line on lines of its own, flags as
// elements with text.
func TestWorkunitAsBOINCWritesIt(t *testing.T) {
	t.Parallel()
	doc := `<file_info>
    <name>in_1</name>
    <url>http://p/download/1a/in_1</url>
    <gzipped_url>http://p/download/1a/in_1.gz</gzipped_url>
    <gzipped_nbytes>12</gzipped_nbytes>
    <md5_cksum>abc</md5_cksum>
    <nbytes>100</nbytes>
    <sticky>1</sticky>
    <no_delete>0</no_delete>
</file_info>
<workunit>
<command_line>
-n 3
</command_line>
<file_ref>
    <file_name>in_1</file_name>
    <open_name>in</open_name>
    <copy_file/>
</file_ref>
</workunit>`
	w, err := ParseWorkunit(doc)
	want := Workunit{CommandLine: "-n 3", Inputs: []InputFile{{Name: "in_1", OpenName: "in", Nbytes: 100, MD5: "abc",
		URLs: []string{"http://p/download/1a/in_1"}, GzippedNbytes: 12, Sticky: true, CopyFile: true}}}
	if err != nil || !reflect.DeepEqual(w, want) {
		t.Fatalf("ParseWorkunit = %+v, %v; want %+v", w, err, want)
	}
}

// TestReadsDocumentsBeforeVersion5 reads the single-root documents written
// before schema version 5, whose files were always copied into the slot.
func TestReadsDocumentsBeforeVersion5(t *testing.T) {
	t.Parallel()
	w, err := ParseWorkunit(`<workunit><command_line>-x</command_line><file_info><name>wu_1_in</name><open_name>in</open_name><nbytes>4096</nbytes><md5_cksum>abc</md5_cksum></file_info></workunit>`)
	want := Workunit{CommandLine: "-x", Inputs: []InputFile{{Name: "wu_1_in", OpenName: "in", Nbytes: 4096, MD5: "abc", CopyFile: true}}}
	if err != nil || !reflect.DeepEqual(w, want) {
		t.Fatalf("ParseWorkunit = %+v, %v; want %+v", w, err, want)
	}
	outs, err := ParseResult(`<result><file_info><name>wu_1_0_0</name><open_name>out</open_name><max_nbytes>65536</max_nbytes></file_info></result>`)
	wantOut := []OutputFile{{Name: "wu_1_0_0", OpenName: "out", MaxNbytes: 65536, CopyFile: true}}
	if err != nil || !reflect.DeepEqual(outs, wantOut) {
		t.Fatalf("ParseResult = %+v, %v; want %+v", outs, err, wantOut)
	}
}

func TestResultRoundTrip(t *testing.T) {
	t.Parallel()
	want := []OutputFile{
		{Name: "wu_1_0_0", OpenName: "out", MaxNbytes: 65536, CopyFile: true},
		{Name: "wu_1_0_1", OpenName: "log", MaxNbytes: 300e3, Optional: true, NoValidate: true},
	}
	doc, err := FormatResult(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc, "<file_info><name>wu_1_0_0</name><generated_locally/>") {
		t.Errorf("result document not in BOINC's form: %s", doc)
	}
	outs, err := ParseResult(doc)
	if err != nil || !reflect.DeepEqual(outs, want) {
		t.Fatalf("ParseResult = %+v, %v; want %+v", outs, err, want)
	}
	for _, bad := range [][]OutputFile{
		{{Name: "r_0", OpenName: "out"}},
		{{Name: "r_0", OpenName: "out", MaxNbytes: -1}},
		{{Name: "../r_0", OpenName: "out", MaxNbytes: 1}},
		{{Name: "r_0", OpenName: "out", MaxNbytes: 1}, {Name: "r_1", OpenName: "out", MaxNbytes: 1}},
	} {
		if _, err := FormatResult(bad); err == nil {
			t.Errorf("FormatResult accepted %+v", bad)
		}
	}
}
