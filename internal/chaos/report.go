package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Report is the outcome of a chaos run: the faults injected and the broken
// promises counted, all of which must be 0. report.json holds it.
type Report struct {
	Faults                 map[string]int `json:"faults"`
	Jobs                   int            `json:"jobs"`
	JobsLost               int            `json:"jobs_lost"`
	DuplicateAssimilations int            `json:"duplicate_assimilations"`
	DuplicateCredit        int            `json:"duplicate_credit"`
	SameUserTwice          int            `json:"same_user_twice"`
	ReportsLost            int            `json:"reports_lost"`
	FilesLeaked            int            `json:"files_leaked"`
	// FilesDeletedEarly counts outputs the handler found gone (a job's
	// file deleted before its assimilation).
	FilesDeletedEarly int `json:"files_deleted_early"`
	// WrongOutputs counts jobs assimilated with an output other than the
	// correct one.
	WrongOutputs int `json:"wrong_outputs"`
	// CountsOff counts the keys of the status page's count tables whose
	// sum differs from the rows (store.CountsRecount).
	CountsOff int `json:"counts_off"`

	// Figures, not failures.
	Finished        bool    `json:"finished"`
	Seed            uint64  `json:"seed"`
	ElapsedSeconds  float64 `json:"elapsed_seconds"`
	JobsAssimilated int     `json:"jobs_assimilated"`
	JobsErrored     int     `json:"jobs_errored"`
	// Instances counts the instances (result rows) the run made, live and
	// purged: the unit of the capacity figures.
	Instances           int      `json:"instances"`
	HandlerCalls        int      `json:"handler_calls"`
	HandlerRedeliveries int      `json:"handler_redeliveries"`
	AckedReports        int      `json:"acked_reports"`
	AckedOutcomeDiffers int      `json:"acked_outcome_differs"`
	FilesLeft           int      `json:"files_left"`
	UnexpectedExits     int      `json:"unexpected_exits"`
	FaultErrors         int      `json:"fault_errors"`
	DiskFullSkipped     string   `json:"disk_full_skipped,omitempty"`
	Notes               []string `json:"notes,omitempty"`
}

// outcomes are the counts that must be 0, in table order.
func (r *Report) outcomes() []struct {
	name string
	n    int
} {
	return []struct {
		name string
		n    int
	}{
		{"jobs_lost", r.JobsLost}, {"duplicate_assimilations", r.DuplicateAssimilations},
		{"duplicate_credit", r.DuplicateCredit}, {"same_user_twice", r.SameUserTwice},
		{"reports_lost", r.ReportsLost}, {"files_leaked", r.FilesLeaked},
		{"files_deleted_early", r.FilesDeletedEarly}, {"wrong_outputs", r.WrongOutputs},
		{"counts_off", r.CountsOff},
	}
}

// OK reports whether the run finished and broke no promise.
func (r *Report) OK() bool {
	if !r.Finished {
		return false
	}
	for _, o := range r.outcomes() {
		if o.n != 0 {
			return false
		}
	}
	return true
}

// WriteTable prints the faults by kind, the jobs and every outcome count.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	kinds := make([]string, 0, len(r.Faults))
	total, kills := 0, 0
	for k, n := range r.Faults {
		kinds = append(kinds, k)
		total += n
		if strings.HasPrefix(k, "kill_") {
			kills += n
		}
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "%-26s %8s\n", "fault", "count")
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-26s %8d\n", k, r.Faults[k])
	}
	fmt.Fprintf(&b, "%-26s %8d\n", "kills (all daemons)", kills)
	fmt.Fprintf(&b, "%-26s %8d\n", "faults (all)", total)
	if r.DiskFullSkipped != "" {
		fmt.Fprintf(&b, "  disk_full skipped: %s\n", r.DiskFullSkipped)
	}
	fmt.Fprintf(&b, "\n%-26s %8d  (assimilated %d, errored %d)\n", "jobs", r.Jobs, r.JobsAssimilated, r.JobsErrored)
	fmt.Fprintf(&b, "%-26s %8d  (redelivered %d)\n", "handler calls", r.HandlerCalls, r.HandlerRedeliveries)
	fmt.Fprintf(&b, "%-26s %8d\n", "reports acknowledged", r.AckedReports)
	fmt.Fprintf(&b, "%-26s %8d\n", "daemon exits not ours", r.UnexpectedExits)
	fmt.Fprintf(&b, "%-26s %8.0f\n", "elapsed seconds", r.ElapsedSeconds)
	fmt.Fprintf(&b, "\n%-26s %8s\n", "outcome (must be 0)", "count")
	for _, o := range r.outcomes() {
		fmt.Fprintf(&b, "%-26s %8d\n", o.name, o.n)
	}
	verdict := "OK: nothing lost"
	if !r.Finished {
		verdict = "FAILED: the run did not finish"
	} else if !r.OK() {
		verdict = "FAILED: promises broken (notes in report.json)"
	}
	fmt.Fprintf(&b, "%s (seed %d)\n", verdict, r.Seed)
	_, err := io.WriteString(w, b.String())
	return err
}

// Write writes report.json into dir.
func (r *Report) Write(dir string) error { return writeJSON(dir, r) }

// writeJSON writes v as dir/report.json.
func writeJSON(dir string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
}
