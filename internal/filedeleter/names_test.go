package filedeleter

import (
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
)

func TestScanNames(t *testing.T) {
	t.Parallel()
	wu, _ := jobxml.FormatWorkunit(jobxml.Workunit{CommandLine: "-n 3", Inputs: []jobxml.InputFile{
		{Name: "a_in", OpenName: "in", Nbytes: 10, MD5: "0123"}, {Name: "b in", OpenName: "in2"}}})
	res, _ := jobxml.FormatResult("r_0", []string{"out", "log"}, 1e6)
	for _, tc := range []struct {
		name, doc, root string
		want            []string
		ok              bool
	}{
		{"what jobxml writes for a job", wu, "workunit", []string{"a_in", "b in"}, true},
		{"what jobxml writes for an instance", res, "result", []string{"r_0_0", "r_0_1"}, true},
		{"empty document", "  \n", "result", nil, true},
		{"no files", "<result></result>", "result", nil, true},
		{"whitespace around", " <result>\n <file_info> <name>x</name> </file_info>\n</result>\n", "result", []string{"x"}, true},
		{"unknown elements are skipped", "<result><a><b>t</b></a><file_info><c>1</c><name>x</name></file_info></result>", "result", []string{"x"}, true},
		{"other root", "<workunit><file_info><name>x</name></file_info></workunit>", "result", nil, false},
		{"escaped by jobxml", "<result><file_info><name>a&gt;b</name></file_info></result>", "result", nil, false},
		{"not allowed outside CDATA", "<result>]]></result>", "result", nil, false},
		{"entity", "<result><file_info><name>a&amp;b</name></file_info></result>", "result", nil, false},
		{"attribute", `<result><file_info id="1"><name>x</name></file_info></result>`, "result", nil, false},
		{"declaration", `<?xml version="1.0"?><result></result>`, "result", nil, false},
		{"comment", "<result><!-- c --></result>", "result", nil, false},
		{"self-closing", "<result><file_info/></result>", "result", nil, false},
		{"file_info without a name", "<result><file_info></file_info></result>", "result", nil, false},
		{"two names", "<result><file_info><name>x</name><name>y</name></file_info></result>", "result", nil, false},
		{"invalid name", "<result><file_info><name>../etc</name></file_info></result>", "result", nil, false},
		{"element inside name", "<result><file_info><name>x<b/></name></file_info></result>", "result", nil, false},
		{"mismatched end", "<result><file_info><name>x</name></file></result>", "result", nil, false},
		{"unclosed", "<result><file_info><name>x</name></file_info>", "result", nil, false},
		{"trailing text", "<result></result>x", "result", nil, false},
		{"control character", "<result>\x01</result>", "result", nil, false},
		{"invalid UTF-8", "<result>\xff</result>", "result", nil, false},
	} {
		got, ok := scanNames(tc.doc, tc.root)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: scanNames(%q) = %q, %v; want %q, %v", tc.name, tc.doc, got, ok, tc.want, tc.ok)
		}
	}
}

// Whatever scanNames accepts, jobxml must read the same way: the scanner
// is a fast path, never a second opinion.
func FuzzScanNames(f *testing.F) {
	wu, _ := jobxml.FormatWorkunit(jobxml.Workunit{Inputs: []jobxml.InputFile{{Name: "a_in", OpenName: "in", Nbytes: 10}}})
	res, _ := jobxml.FormatResult("r_0", []string{"out", "log"}, 1e6)
	for _, doc := range []string{wu, res, "", "<result><file_info><name>x</name></file_info></result>",
		"<workunit><command_line>-x</command_line><file_info><name>a b</name><x>1</x></file_info></workunit>",
		"<result><a><b>\u00e9</b></a></result>", "<result>]]></result>"} {
		f.Add(doc, false)
		f.Add(doc, true)
	}
	f.Fuzz(func(t *testing.T, doc string, asResult bool) {
		root := "workunit"
		if asResult {
			root = "result"
		}
		got, ok := scanNames(doc, root)
		if !ok {
			return
		}
		var want []string
		var err error
		if asResult {
			var outs []jobxml.OutputFile
			outs, err = jobxml.ParseResult(doc)
			for _, o := range outs {
				want = append(want, o.Name)
			}
		} else {
			var w jobxml.Workunit
			w, err = jobxml.ParseWorkunit(doc)
			for _, in := range w.Inputs {
				want = append(want, in.Name)
			}
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("scanNames(%q, %s) = %q; jobxml reads %q, %v", doc, root, got, want, err)
		}
	})
}
