package validator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/job"
)

// inst is one instance of a job in a judge test: its output (none when
// missing), and whether it is the job's canonical instance already.
type inst struct {
	out       string
	missing   bool
	canonical bool
	// filesDeleted marks the instance's files deleted (file_delete_state
	// DONE).
	filesDeleted bool
}

var gone = inst{missing: true}

func canon(out string) inst { return inst{out: out, canonical: true} }

// failingChecker fails Init transiently for one output.
type failingChecker struct {
	Bitwise
	failOn string
}

func (f failingChecker) Init(ctx context.Context, r row.Result, files []job.Output) (any, error) {
	b, err := os.ReadFile(files[0].Path)
	if err == nil && string(b) == f.failOn {
		return nil, errors.New("upload directory unreachable")
	}
	return f.Bitwise.Init(ctx, r, files)
}

// countingChecker counts Init and Cleanup calls.
type countingChecker struct {
	Bitwise
	inits, cleanups *int
}

func (c countingChecker) Init(ctx context.Context, r row.Result, files []job.Output) (any, error) {
	*c.inits++
	return c.Bitwise.Init(ctx, r, files)
}

func (c countingChecker) Cleanup(v any) { *c.cleanups++ }

// judgeJob lays the instances' outputs out in a fresh upload directory and
// judges the job, ids 1, 2, ... in order.
func judgeJob(t *testing.T, c Checker, minQuorum int, jobFilesDeleted bool, expected *string, insts []inst) (Verdict, error) {
	t.Helper()
	upload := t.TempDir()
	s := mustNew(New(withDefaults(Config{App: "demo", UploadDir: upload, Fanout: fanoutN, TempDir: t.TempDir()}), Deps{Checker: c}))
	wu := row.Workunit{ID: 1, Name: "job", MinQuorum: minQuorum}
	if jobFilesDeleted {
		wu.FileDeleteState = state.FileDeleteDone
	}
	var exp []byte
	if expected != nil {
		wu.KnownAnswerID, exp = 1, []byte(*expected)
	}
	var results []row.Result
	for i, in := range insts {
		id := int64(i + 1)
		name := fmt.Sprintf("job_%d", i)
		doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
		if err != nil {
			t.Fatal(err)
		}
		r := row.Result{ID: id, WorkunitID: 1, Name: name, ServerState: state.ServerOver,
			Outcome: state.OutcomeSuccess, XMLDocIn: doc}
		if in.canonical {
			wu.CanonicalResultID, r.ValidateState = id, state.ValidateValid
		}
		if in.filesDeleted {
			r.FileDeleteState = state.FileDeleteDone
		}
		results = append(results, r)
		if in.missing {
			continue
		}
		path, err := fanout.Path(upload, jobxml.OutputName(name, 0), fanoutN)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(in.out), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
			t.Fatal(err)
		}
	}
	return s.judge(context.Background(), wu, results, exp)
}

func ptr(s string) *string { return &s }

func TestJudge(t *testing.T) {
	t.Parallel()
	numeric := Numeric{RelTolerance: 1e-6}
	tests := []struct {
		name       string
		checker    Checker
		quorum     int
		jobDeleted bool
		expected   *string // a known-answer job's expected output
		insts      []inst
		want       Verdict
		wantErr    bool
	}{
		{name: "agreeing pair", quorum: 2, insts: []inst{{out: "a"}, {out: "a"}},
			want: Verdict{Canonical: 1, States: states{1: valid, 2: valid}}},
		{name: "cheater in the quorum of 3", quorum: 2, insts: []inst{{out: "a"}, {out: "a"}, {out: "x"}},
			want: Verdict{Canonical: 1, States: states{1: valid, 2: valid, 3: invalid}}},
		{name: "two cheaters disagreeing", quorum: 2, insts: []inst{{out: "a"}, {out: "x"}, {out: "y"}},
			want: Verdict{States: states{1: inconc, 2: inconc, 3: inconc}, TargetNResults: 4}},
		{name: "all disagree: inconclusive", quorum: 2, insts: []inst{{out: "a"}, {out: "b"}},
			want: Verdict{States: states{1: inconc, 2: inconc}, TargetNResults: 3}},
		{name: "late result after the canonical: valid", quorum: 2, insts: []inst{canon("a"), {out: "a"}},
			want: Verdict{States: states{2: valid}}},
		{name: "late result after the canonical: invalid", quorum: 2, insts: []inst{canon("a"), {out: "b"}},
			want: Verdict{States: states{2: invalid}}},
		{name: "late result after the canonical: missing output", quorum: 2, insts: []inst{canon("a"), gone},
			want: Verdict{States: states{2: invalid}, ValidateErrors: []int64{2}}},
		{name: "late result after the job's files are deleted: too late", quorum: 2, jobDeleted: true,
			insts: []inst{{missing: true, canonical: true}, {out: "a"}},
			want:  Verdict{States: states{2: tooLate}}},
		{name: "late result after the canonical's files are deleted: too late", quorum: 2,
			insts: []inst{{missing: true, canonical: true, filesDeleted: true}, {out: "a"}},
			want:  Verdict{States: states{2: tooLate}}},
		{name: "canonical output missing though not deleted: retried later", quorum: 2,
			insts: []inst{{missing: true, canonical: true}, {out: "a"}}, wantErr: true},
		{name: "missing output: a validate error, the other waits", quorum: 2, insts: []inst{gone, {out: "a"}},
			want: Verdict{States: states{1: invalid}, ValidateErrors: []int64{1}}},
		{name: "missing output beside a quorum", quorum: 2, insts: []inst{{out: "a"}, gone, {out: "a"}},
			want: Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: valid}, ValidateErrors: []int64{2}}},
		{name: "min_quorum 1", quorum: 1, insts: []inst{{out: "a"}},
			want: Verdict{Canonical: 1, States: states{1: valid}}},
		{name: "trust checker: different outputs all valid", checker: Trust{}, quorum: 2,
			insts: []inst{{out: "a"}, {out: "b"}},
			want:  Verdict{Canonical: 1, States: states{1: valid, 2: valid}}},
		{name: "trust checker: a missing output is still a validate error", checker: Trust{}, quorum: 2,
			insts: []inst{gone, {out: "a"}},
			want:  Verdict{States: states{1: invalid}, ValidateErrors: []int64{1}}},
		{name: "numeric checker: within tolerance", checker: numeric, quorum: 2,
			insts: []inst{{out: "1.0 2.0"}, {out: "1.0000001 2.0000001"}},
			want:  Verdict{Canonical: 1, States: states{1: valid, 2: valid}}},
		{name: "numeric checker: past tolerance", checker: numeric, quorum: 2,
			insts: []inst{{out: "1.0"}, {out: "1.1"}},
			want:  Verdict{States: states{1: inconc, 2: inconc}, TargetNResults: 3}},
		{name: "command checker: compare exits 2, retried later", checker: Command{CompareArgv: sh("exit 2")},
			quorum: 2, insts: []inst{{out: "a"}, {out: "a"}}, wantErr: true},
		{name: "command checker: init rejects an output",
			checker: Command{InitArgv: sh(`grep -q good "$1"`), CompareArgv: sh("exit 0")}, quorum: 2,
			insts: []inst{{out: "bad"}, {out: "good"}, {out: "good"}},
			want:  Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid}, ValidateErrors: []int64{1}}},
		{name: "checker fails transiently: retried later", checker: failingChecker{failOn: "b"}, quorum: 2,
			insts: []inst{{out: "a"}, {out: "b"}}, wantErr: true},
		{name: "known answer matched: valid and canonical", quorum: 1, expected: ptr("42"),
			insts: []inst{{out: "42"}},
			want:  Verdict{Canonical: 1, States: states{1: valid}}},
		{name: "known answer missed: invalid, no canonical", quorum: 1, expected: ptr("42"),
			insts: []inst{{out: "41"}},
			want:  Verdict{States: states{1: invalid}}},
		{name: "known answer: the first matching instance is canonical", quorum: 1, expected: ptr("42"),
			insts: []inst{{out: "41"}, {out: "42"}, {out: "42"}},
			want:  Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid}}},
		{name: "known answer: agreeing cheaters are still caught", quorum: 2, expected: ptr("42"),
			insts: []inst{{out: "41"}, {out: "41"}},
			want:  Verdict{States: states{1: invalid, 2: invalid}}},
		{name: "known answer: late instance checked against the answer", quorum: 1, expected: ptr("42"),
			insts: []inst{canon("42"), {out: "41"}},
			want:  Verdict{States: states{2: invalid}}},
		{name: "known answer: missing output", quorum: 1, expected: ptr("42"), insts: []inst{gone},
			want: Verdict{States: states{1: invalid}, ValidateErrors: []int64{1}}},
		{name: "known answer compared with tolerance", checker: numeric, quorum: 1, expected: ptr("1.0"),
			insts: []inst{{out: "1.0000001"}},
			want:  Verdict{Canonical: 1, States: states{1: valid}}},
		{name: "nothing awaits a verdict", quorum: 2, insts: []inst{canon("a")},
			want: Verdict{States: states{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := tt.checker
			if c == nil {
				c = Bitwise{}
			}
			got, err := judgeJob(t, c, tt.quorum, tt.jobDeleted, tt.expected, tt.insts)
			if tt.wantErr {
				if err == nil {
					t.Errorf("judge = %+v, nil; want an error (job retried later)", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("judge(%+v)\n got  %+v, %v\n want %+v, nil", tt.insts, got, err, tt.want)
			}
		})
	}
}

func TestJudgeCleansUpEveryOutput(t *testing.T) {
	t.Parallel()
	for _, insts := range [][]inst{
		{{out: "a"}, {out: "a"}, gone},
		{canon("a"), {out: "b"}},
	} {
		var inits, cleanups int
		if _, err := judgeJob(t, countingChecker{inits: &inits, cleanups: &cleanups}, 2, false, nil, insts); err != nil {
			t.Fatalf("judge: %v", err)
		}
		if inits == 0 || inits != cleanups {
			t.Errorf("judge(%+v): %d Init, %d Cleanup; want equal and non-zero", insts, inits, cleanups)
		}
	}
}
