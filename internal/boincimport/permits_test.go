package boincimport_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// boincDocIn is a result.xml_doc_in as BOINC's create_work writes it for
// outputs named name_0, name_1, ..., with the upload certificate sig (""
// for none: make_project's dont_generate_upload_certificates).
func boincDocIn(name, sig string, maxNbytes ...string) string {
	var b strings.Builder
	for i, m := range maxNbytes {
		b.WriteString("<file_info>\n    <name>" + name + "_" + string(rune('0'+i)) + "</name>\n    <generated_locally/>\n    <upload_when_present/>\n")
		if m != "" {
			b.WriteString("    <max_nbytes>" + m + "</max_nbytes>\n")
		}
		b.WriteString("    <url>http://old.example.org/proj_cgi/file_upload_handler</url>\n")
		if sig != "" {
			b.WriteString("<xml_signature>\n" + sig + "</xml_signature>\n")
		}
		b.WriteString("</file_info>\n")
	}
	b.WriteString("<result>\n    <name>" + name + "</name>\n</result>\n")
	return b.String()
}

// TestUploadPermits: an output of a task in progress that carries no
// upload certificate gets a permit with its size limit and the task's
// deadline plus the grace; one with a certificate, or of a task not in
// progress (unsent: our scheduler signs it when it sends it; over: its
// upload is no longer wanted), gets none.
func TestUploadPermits(t *testing.T) {
	t.Parallel()
	const deadline = 1_700_000_000
	grace := time.Hour
	sig := strings.Repeat("ab", 64) + "\n.\n"
	in := func(name, doc string) row.Result {
		return row.Result{Name: name, ServerState: state.ServerInProgress, ReportDeadline: deadline, XMLDocIn: doc}
	}
	for _, tc := range []struct {
		what string
		rs   []row.Result
		want []outputfile.Permit
		err  string
	}{
		{"in progress, no certificate, two outputs", []row.Result{in("wu_1_0", boincDocIn("wu_1_0", "", "65536", "1e6"))},
			[]outputfile.Permit{{Name: "wu_1_0_0", MaxNbytes: 65536, Expires: deadline + 3600}, {Name: "wu_1_0_1", MaxNbytes: 1000000, Expires: deadline + 3600}}, ""},
		{"in progress, empty xml_signature element", []row.Result{in("wu_2_0", strings.Replace(boincDocIn("wu_2_0", "", "100"), "</file_info>", "<xml_signature>\n</xml_signature>\n</file_info>", 1))},
			[]outputfile.Permit{{Name: "wu_2_0_0", MaxNbytes: 100, Expires: deadline + 3600}}, ""},
		{"in progress, certificate", []row.Result{in("wu_3_0", boincDocIn("wu_3_0", sig, "100"))}, nil, ""},
		{"unsent", []row.Result{{Name: "wu_4_0", ServerState: state.ServerUnsent, XMLDocIn: boincDocIn("wu_4_0", "", "100")}}, nil, ""},
		{"over", []row.Result{{Name: "wu_5_0", ServerState: state.ServerOver, ReportDeadline: deadline, XMLDocIn: boincDocIn("wu_5_0", "", "100")}}, nil, ""},
		{"in progress beside unsent", []row.Result{in("wu_6_0", boincDocIn("wu_6_0", "", "7")), {Name: "wu_6_1", ServerState: state.ServerUnsent, XMLDocIn: boincDocIn("wu_6_1", "", "7")}},
			[]outputfile.Permit{{Name: "wu_6_0_0", MaxNbytes: 7, Expires: deadline + 3600}}, ""},
		{"no size limit", []row.Result{in("wu_7_0", boincDocIn("wu_7_0", "", ""))}, nil, "needs a size limit"},
		{"unparsable document", []row.Result{in("wu_8_0", "<file_info><name>x</file_info>")}, nil, "parse xml_doc_in"},
	} {
		got, err := boincimport.UploadPermits(tc.rs, grace)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: UploadPermits error %v, want one saying %q", tc.what, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: UploadPermits = %+v, %v; want %+v", tc.what, got, err, tc.want)
		}
	}
}
