package jobxml

import (
	"encoding/xml"
	"reflect"
	"testing"
)

// fastSeeds are documents in the canonical form and near it.
var fastSeeds = []string{
	`<workunit><file_info><name>wu_1_in</name><open_name>in</open_name><nbytes>4096</nbytes><md5_cksum>abc</md5_cksum></file_info></workunit>`,
	`<workunit><command_line>--rounds 10</command_line><file_info><name>a</name><open_name>in</open_name><nbytes>1e+06</nbytes><md5_cksum></md5_cksum></file_info><file_info><name>b</name><open_name>in2</open_name><nbytes>0</nbytes><md5_cksum>x</md5_cksum></file_info></workunit>`,
	`<workunit></workunit>`,
	`<workunit><command_line>a &amp; b</command_line></workunit>`,
	`<workunit> <file_info><name>a</name></file_info></workunit>`,
	`<workunit><file_info><name>a</name><open_name>in</open_name><nbytes> 12 </nbytes><md5_cksum>x</md5_cksum></file_info></workunit>`,
	`<result><file_info><name>wu_1_0_0</name><open_name>out</open_name><max_nbytes>65536</max_nbytes></file_info></result>`,
	`<result></result>`,
	`<result><file_info><name>x</name><open_name>o</open_name><max_nbytes>NaN</max_nbytes></file_info></result>`,
	`<result><file_info><name>x</name><open_name>o</open_name><max_nbytes>1</max_nbytes></file_info></result>trailing`,
}

// TestFastParseAgrees checks the fast readers against encoding/xml on
// documents written by the formatters.
func TestFastParseAgrees(t *testing.T) {
	t.Parallel()
	for _, w := range []Workunit{
		{},
		{CommandLine: "--rounds 10 <x> & 'y'", Inputs: []InputFile{{Name: "wu_1_in", OpenName: "in", Nbytes: 4096, MD5: "abc"}}},
		{Inputs: []InputFile{{Name: "a", OpenName: "o\tp", Nbytes: 1.5e300}, {Name: "b", Nbytes: 0.1}}},
	} {
		doc, err := FormatWorkunit(w)
		if err != nil {
			t.Fatal(err)
		}
		checkWorkunit(t, doc)
	}
	for _, open := range [][]string{nil, {"out"}, {"a", "b&c", "é"}} {
		doc, err := FormatResult("wu_7_1", open, 123456.5)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, doc)
	}
	for _, doc := range fastSeeds {
		checkWorkunit(t, doc)
		checkResult(t, doc)
	}
	if _, ok := parseWorkunitFast(fastSeeds[0]); !ok {
		t.Error("the fast reader declined the canonical form")
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
	var want workunitDoc
	if err := xml.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatalf("fast reader took %q, encoding/xml refuses it: %v", doc, err)
	}
	want.XMLName = xml.Name{}
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
	var want resultDoc
	if err := xml.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatalf("fast reader took %q, encoding/xml refuses it: %v", doc, err)
	}
	if !reflect.DeepEqual(got, want.Outputs) {
		t.Fatalf("result %q: fast %+v, encoding/xml %+v", doc, got, want.Outputs)
	}
}

// BenchmarkParseWorkunit reads a one-input document in the canonical form.
func BenchmarkParseWorkunit(b *testing.B) {
	doc := fastSeeds[0]
	for b.Loop() {
		if _, err := ParseWorkunit(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseWorkunitXML is BenchmarkParseWorkunit through encoding/xml.
func BenchmarkParseWorkunitXML(b *testing.B) {
	doc := []byte(fastSeeds[0])
	for b.Loop() {
		var d workunitDoc
		if err := xml.Unmarshal(doc, &d); err != nil {
			b.Fatal(err)
		}
	}
}
