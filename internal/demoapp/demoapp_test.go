package demoapp_test

import (
	"bytes"
	"testing"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobtemplate"
)

// TestTemplates: the demo job's templates are valid BOINC templates of the
// shape the package documents, and their command line is the work's.
func TestTemplates(t *testing.T) {
	in, err := jobtemplate.ParseInput(demoapp.InputTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if in.NumGiven() != 3 || in.CommandLine != demoapp.CommandLine(demoapp.Rounds) {
		t.Errorf("input template takes %d files, command line %q; want 3 and %q", in.NumGiven(), in.CommandLine, demoapp.CommandLine(demoapp.Rounds))
	}
	wantIn := []struct {
		open         string
		gzip, sticky bool
	}{{demoapp.InName, false, false}, {demoapp.ModelName, false, true}, {demoapp.ParamsName, true, false}}
	for i, w := range wantIn {
		f := in.Files[i]
		if f.OpenName != w.open || f.Gzip != w.gzip || f.Sticky != w.sticky || !f.CopyFile {
			t.Errorf("input %d = %+v, want %+v and copy_file", i, f, w)
		}
	}
	out, err := jobtemplate.ParseOutput(demoapp.OutputTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Files) != 2 || out.Files[0].OpenName != demoapp.OutName || out.Files[0].NoValidate ||
		out.Files[1].OpenName != demoapp.LogName || !out.Files[1].NoValidate || !out.Files[1].Optional {
		t.Errorf("output template %+v: want out validated, log optional and not validated", out.Files)
	}
}

// TestOutputs: a one-file job's out is the iterated digest of its input,
// a generated job's depends on every file and the rounds.
func TestOutputs(t *testing.T) {
	if !bytes.Equal(demoapp.SingleOutput("j"), demoapp.Out(demoapp.Files{demoapp.Input("j")}, demoapp.Rounds)) {
		t.Error("a one-file job's out is not Compute of its input")
	}
	base := demoapp.Output("j")
	other := demoapp.GeneratedFiles("j")
	other[1] = append([]byte{1}, other[1][1:]...)
	for name, out := range map[string][]byte{
		"single":       demoapp.SingleOutput("j"),
		"other job":    demoapp.Output("k"),
		"other model":  demoapp.Out(other, demoapp.Rounds),
		"fewer rounds": demoapp.Out(demoapp.GeneratedFiles("j"), demoapp.Rounds-1),
	} {
		if bytes.Equal(out, base) {
			t.Errorf("%s: the same out as the generated job's", name)
		}
	}
	for _, args := range [][]string{{"--rounds"}, {"--rounds", "0"}, {"--rounds=x"}} {
		if _, err := demoapp.ParseRounds(args); err == nil {
			t.Errorf("ParseRounds(%q) accepted", args)
		}
	}
	if n, err := demoapp.ParseRounds([]string{"a", "--rounds", "5"}); n != 5 || err != nil {
		t.Errorf("ParseRounds = %d, %v; want 5", n, err)
	}
	if n, err := demoapp.ParseRounds(nil); n != demoapp.Rounds || err != nil {
		t.Errorf("ParseRounds(nil) = %d, %v; want %d", n, err, demoapp.Rounds)
	}
}
