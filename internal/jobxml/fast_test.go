package jobxml

import (
	"reflect"
	"strings"
	"testing"
)

// fastSeeds are documents in the canonical form and near it.
var fastSeeds = []string{
	`<file_info><name>wu_1_in</name><md5_cksum>abc</md5_cksum><nbytes>4096</nbytes></file_info><workunit><file_ref><file_name>wu_1_in</file_name><open_name>in</open_name><copy_file/></file_ref></workunit>`,
	`<file_info><name>a</name><url>http://x/a</url><url>http://y/a</url><md5_cksum></md5_cksum><nbytes>1e+06</nbytes><gzipped_nbytes>10</gzipped_nbytes><sticky/><no_delete/></file_info><file_info><name>b</name><md5_cksum>x</md5_cksum><nbytes>0</nbytes></file_info><workunit><command_line>--rounds 10</command_line><file_ref><file_name>a</file_name><open_name>in</open_name></file_ref><file_ref><file_name>b</file_name><open_name>in2</open_name><copy_file/></file_ref></workunit>`,
	`<workunit></workunit>`,
	`<workunit><command_line>a &amp; b</command_line></workunit>`,
	`<workunit><command_line> a </command_line></workunit>`,
	`<file_info><name>a</name><md5_cksum>x</md5_cksum><nbytes>1</nbytes></file_info><workunit><file_ref><file_name>b</file_name><open_name>in</open_name></file_ref></workunit>`,
	`<file_info><name>a</name><md5_cksum>x</md5_cksum><nbytes> 12 </nbytes></file_info><workunit><file_ref><file_name>a</file_name><open_name>in</open_name></file_ref></workunit>`,
	`<workunit><file_info><name>wu_1_in</name><open_name>in</open_name><nbytes>4096</nbytes><md5_cksum>abc</md5_cksum></file_info></workunit>`,
	`<file_info><name>wu_1_0_0</name><generated_locally/><upload_when_present/><max_nbytes>65536</max_nbytes></file_info><result><file_ref><file_name>wu_1_0_0</file_name><open_name>out</open_name><copy_file/><optional/><no_validate/></file_ref></result>`,
	`<result></result>`,
	`<file_info><name>x</name><generated_locally/><upload_when_present/><max_nbytes>NaN</max_nbytes></file_info><result><file_ref><file_name>x</file_name><open_name>o</open_name></file_ref></result>`,
	`<file_info><name>x</name><generated_locally/><upload_when_present/><max_nbytes>1</max_nbytes></file_info><result><file_ref><file_name>x</file_name><open_name>o</open_name></file_ref></result>trailing`,
	`<result><file_info><name>wu_1_0_0</name><open_name>out</open_name><max_nbytes>65536</max_nbytes></file_info></result>`,
}

// TestFastParseAgrees checks the fast readers against encoding/xml on
// documents written by the formatters.
func TestFastParseAgrees(t *testing.T) {
	t.Parallel()
	for _, w := range []Workunit{
		{},
		{CommandLine: "--rounds 10 <x> & 'y'", Inputs: []InputFile{{Name: "wu_1_in", OpenName: "in", Nbytes: 4096, MD5: "abc", CopyFile: true}}},
		{Inputs: []InputFile{
			{Name: "a", OpenName: "o_p", Nbytes: 1.5e300, URLs: []string{"http://h/a?x=1&y=2"}, Sticky: true},
			{Name: "b", OpenName: "db", Nbytes: 0.1, GzippedNbytes: 7, NoDelete: true},
		}},
	} {
		doc, err := FormatWorkunit(w)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := parseWorkunitFast(doc); !ok && !strings.Contains(doc, "&") {
			t.Errorf("the fast reader declined %s", doc)
		}
		checkWorkunit(t, doc)
	}
	for _, outs := range [][]OutputFile{
		nil,
		{{Name: "r_0", OpenName: "out", MaxNbytes: 1 << 20}},
		{{Name: "r_0", OpenName: "a", MaxNbytes: 1, CopyFile: true}, {Name: "r_1", OpenName: "b&c", MaxNbytes: 2, Optional: true, NoValidate: true}},
	} {
		doc, err := FormatResult(outs)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := parseResultFast(doc); !ok && !strings.Contains(doc, "&") {
			t.Errorf("the fast reader declined %s", doc)
		}
		checkResult(t, doc)
	}
	for _, doc := range fastSeeds {
		checkWorkunit(t, doc)
		checkResult(t, doc)
	}
}

// FuzzFastParse checks that wherever the fast readers answer, encoding/xml
// reads the same.
func FuzzFastParse(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		checkWorkunit(t, doc)
		checkResult(t, doc)
	})
}

func checkWorkunit(t *testing.T, doc string) {
	t.Helper()
	got, ok := parseWorkunitFast(doc)
	if !ok {
		return
	}
	want, err := parseWorkunitXML(doc)
	if err != nil {
		t.Fatalf("fast reader took %q, encoding/xml refuses it: %v", doc, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("workunit %q: fast %+v, encoding/xml %+v", doc, got, want)
	}
}

func checkResult(t *testing.T, doc string) {
	t.Helper()
	got, ok := parseResultFast(doc)
	if !ok {
		return
	}
	want, err := parseResultXML(doc)
	if err != nil {
		t.Fatalf("fast reader took %q, encoding/xml refuses it: %v", doc, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("result %q: fast %+v, encoding/xml %+v", doc, got, want)
	}
}

// BenchmarkParseWorkunit reads a three-input document in the canonical form.
func BenchmarkParseWorkunit(b *testing.B) {
	doc, err := FormatWorkunit(Workunit{CommandLine: "--rounds 3", Inputs: []InputFile{
		{Name: "job_1_in", OpenName: "in", Nbytes: 4096, MD5: "eae797ff01dd963522f1b6a54ac3242a"},
		{Name: "sf_db_eae797ff01dd963522f1b6a54ac3242a", OpenName: "db", Nbytes: 1e6, MD5: "eae797ff01dd963522f1b6a54ac3242a", Sticky: true, NoDelete: true},
		{Name: "job_1_params", OpenName: "params", Nbytes: 100, MD5: "eae797ff01dd963522f1b6a54ac3242a", GzippedNbytes: 60},
	}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ParseWorkunit(doc); err != nil {
			b.Fatal(err)
		}
	}
}
