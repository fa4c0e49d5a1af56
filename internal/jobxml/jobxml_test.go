package jobxml

import (
	"reflect"
	"testing"
)

func TestWorkunitRoundTrip(t *testing.T) {
	t.Parallel()
	in := Workunit{CommandLine: "--rounds 10", Inputs: []InputFile{{Name: "wu_1_in", OpenName: "in", Nbytes: 4096, MD5: "abc"}}}
	doc, err := FormatWorkunit(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseWorkunit(doc)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("ParseWorkunit(FormatWorkunit(%+v)) = %+v, %v", in, out, err)
	}
	if _, err := FormatWorkunit(Workunit{Inputs: []InputFile{{Name: "../x"}}}); err == nil {
		t.Fatal("FormatWorkunit accepted ../x")
	}
	if _, err := ParseWorkunit(`<workunit><file_info><name>../../etc/passwd</name></file_info></workunit>`); err == nil {
		t.Fatal("ParseWorkunit accepted a path")
	}
}

func TestResultRoundTrip(t *testing.T) {
	t.Parallel()
	doc, err := FormatResult("wu_1_0", []string{"out"}, 65536)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := ParseResult(doc)
	want := []OutputFile{{Name: "wu_1_0_0", OpenName: "out", MaxNbytes: 65536}}
	if err != nil || !reflect.DeepEqual(outs, want) {
		t.Fatalf("ParseResult = %+v, %v; want %+v", outs, err, want)
	}
}
