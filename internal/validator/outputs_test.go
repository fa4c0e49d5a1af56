package validator

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// setTemplate is the output set of the jobs of TestOutputSetsAreCompared:
// two outputs compared, a log not compared, and an optional output.
var setTemplate = []jobxml.OutputFile{
	{OpenName: "out"}, {OpenName: "sum"}, {OpenName: "log", NoValidate: true}, {OpenName: "extra", Optional: true},
}

// closed stands for an output the host did not upload: the scheduler
// leaves a closed empty file in its place when it records the report.
const closed = "\x00closed"

// addOutputs inserts a reported success of job wuID whose outputs are
// setTemplate's, and uploads the ones files holds (logical name →
// content), finished (or closed for the content closed).
func (b *bundle) addOutputs(t *testing.T, wuID int64, name string, userID, hostID int64, files map[string]string) int64 {
	t.Helper()
	outs := make([]jobxml.OutputFile, len(setTemplate))
	for i, f := range setTemplate {
		f.Name, f.MaxNbytes, f.CopyFile = jobxml.OutputName(name, i), 1e6, true
		outs[i] = f
		content, ok := files[f.OpenName]
		if !ok {
			continue
		}
		path, err := fanout.Path(b.upload, f.Name, fanoutN)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := outputfile.FinishedMode
		if content == closed {
			content, mode = "", outputfile.ClosedMode
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := jobxml.FormatResult(outs)
	if err != nil {
		t.Fatal(err)
	}
	return storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: t0, Job: wuID, Name: name,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInit, User: userID,
		Host: hostID, App: b.appID, XMLDocIn: doc}).ID
}

// TestOutputSetsAreCompared: every checker compares a result's whole
// output set, each output by its logical name: the results of a job agree
// only when every compared output agrees; a no_validate output is not
// compared; an optional output missing from both is equal, missing from
// one a disagreement; a required output missing is a validate error.
func TestOutputSetsAreCompared(t *testing.T) {
	t.Parallel()
	// The compare command compares argument i with argument i + n, and
	// fails (a transient error) unless it was told the outputs' names.
	compare := sh(`n=$TASKSERVER_FILES_PER_RESULT
case "$TASKSERVER_OUTPUT_NAMES" in
"out
sum"|"out
sum
extra") ;;
*) echo "names: $TASKSERVER_OUTPUT_NAMES"; exit 2 ;;
esac
[ $# -eq $((2*n)) ] || exit 2
i=1
while [ $i -le $n ]; do
	eval a=\${$i}
	eval b=\${$((i+n))}
	cmp -s "$a" "$b" || exit 1
	i=$((i+1))
done
exit 0`)
	base := map[string]string{"out": "1 2 3\n", "sum": "6\n", "log": "host a\n"}
	with := func(changes map[string]string, drop ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		return m
	}
	jobs := []struct {
		name string
		a, b map[string]string
		want state.ValidateState // of both results
		// validateError marks b as failing to deliver.
		validateError bool
	}{
		{"equal", base, base, state.ValidateValid, false},
		{"second output differs", base, with(map[string]string{"sum": "7\n"}), state.ValidateInconclusive, false},
		{"no_validate output differs", base, with(map[string]string{"log": "host b\n"}), state.ValidateValid, false},
		{"optional in both", with(map[string]string{"extra": "x"}), with(map[string]string{"extra": "x"}), state.ValidateValid, false},
		{"optional differs", with(map[string]string{"extra": "x"}), with(map[string]string{"extra": "y"}), state.ValidateInconclusive, false},
		{"optional missing from one", with(map[string]string{"extra": "x"}), base, state.ValidateInconclusive, false},
		{"optional closed in both", with(map[string]string{"extra": closed}), base, state.ValidateValid, false},
		{"optional closed in one", with(map[string]string{"extra": closed}), with(map[string]string{"extra": "x"}), state.ValidateInconclusive, false},
		{"required output closed", base, with(map[string]string{"sum": closed}), state.ValidateInit, true},
		{"required output missing", base, with(nil, "sum"), state.ValidateInit, true},
		{"no_validate output missing", base, with(nil, "log"), state.ValidateInit, true},
	}
	for _, c := range []struct {
		name    string
		checker Checker
	}{
		{"bitwise", Bitwise{}},
		{"numeric", Numeric{RelTolerance: 1e-9}},
		{"command", Command{CompareArgv: compare}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}, c.checker)
			u, h := b.volunteer(t, "a@example.com")
			ids := make([][2]int64, len(jobs))
			for i, j := range jobs {
				wu := b.addJob(t, "job"+string(rune('a'+i)))
				ids[i][0] = b.addOutputs(t, wu, j.name+"_0", u, h, j.a)
				ids[i][1] = b.addOutputs(t, wu, j.name+"_1", u, h, j.b)
			}
			runOnce(t, b.svc)
			for i, j := range jobs {
				ra, rb := b.result(t, ids[i][0]), b.result(t, ids[i][1])
				if j.validateError {
					if rb.Outcome != state.OutcomeValidateError || ra.ValidateState != state.ValidateInit {
						t.Errorf("%s: results = %v, %v/%v; want init, validate_error", j.name, ra.ValidateState,
							rb.ValidateState, rb.Outcome)
					}
					continue
				}
				if ra.ValidateState != j.want || rb.ValidateState != j.want {
					t.Errorf("%s: results = %v, %v; want %v", j.name, ra.ValidateState, rb.ValidateState, j.want)
				}
			}
		})
	}
}
