package projectprefs

import "testing"

// FuzzParse: any document either fails with ErrSyntax or reads, and what
// Format writes from it reads back as the same preferences.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "<project_preferences><app_id>1</app_id></project_preferences>",
		`<project_preferences><venue name="home"><no_cpu/></venue><project_specific><x a="1">&amp;</x></project_specific></project_preferences>`,
		"<project_preferences><no_rsc>fpga</no_rsc><max_jobs>3</max_jobs><allow_beta_work>1</allow_beta_work></project_preferences>"} {
		f.Add(s, "")
		f.Add(s, "home")
	}
	f.Fuzz(func(t *testing.T, doc, venue string) {
		p, err := Parse(doc, venue)
		if err != nil {
			return
		}
		if venue != "" {
			// Format writes the default venue only.
			if p, err = Parse(doc, ""); err != nil {
				t.Fatalf("Parse(%q, %q) read, Parse(%q, \"\") = %v", doc, venue, doc, err)
			}
		}
		out := Format(p)
		back, err := Parse(out, "")
		if err != nil {
			t.Fatalf("Parse(Format(Parse(%q))) = %v\n%s", doc, err, out)
		}
		if !equal(back, p) {
			t.Fatalf("Parse(Format(p)) = %+v, want %+v\n%s", back, p, out)
		}
	})
}
