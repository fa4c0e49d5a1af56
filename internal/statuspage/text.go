package statuspage

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteText writes s as the text report `taskctl status` prints: the
// page's sections in the page's order, then the detailed counts.
func WriteText(out io.Writer, s Status) error {
	ew := &errWriter{w: out}
	fmt.Fprintf(ew, "Status at %s\n\n", time.Unix(s.Time, 0).UTC().Format(time.RFC3339))

	fmt.Fprintln(ew, "DAEMONS")
	if len(s.Daemons) == 0 {
		fmt.Fprintln(ew, "  none configured (no daemons: section in the configuration file)")
	} else {
		w := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "  NAME\tADDRESS\tSTATE\tLAST SUCCESS\tPROBLEM\n")
		for _, d := range s.Daemons {
			last := "-"
			if d.LastSuccessAgeSeconds != nil {
				last = ageText(d.LastSuccessAgeSeconds) + " ago"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", d.Name, orDash(d.Address), d.State, last, orDash(d.Error))
		}
		_ = w.Flush()
	}

	q := s.Queues
	fmt.Fprintln(ew, "\nQUEUES")
	w := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		name string
		n    int64
	}{
		{"unsent results", q.UnsentResults},
		{"results in progress", q.InProgressResults},
		{"jobs due for transition", q.JobsDueTransition},
		{"oldest due transition (s behind)", q.OldestDueTransitionAgeSeconds},
		{"jobs awaiting validation", q.JobsAwaitingValidation},
		{"jobs awaiting assimilation", q.JobsAwaitingAssimilation},
		{"job files awaiting deletion", q.JobFilesAwaitingDeletion},
		{"result files awaiting deletion", q.ResultFilesAwaitingDeletion},
		{"jobs failed", q.JobsFailed},
		{"jobs held", q.JobsHeld},
	} {
		fmt.Fprintf(w, "  %s\t%d\n", row.name, row.n)
	}
	_ = w.Flush()

	fmt.Fprintln(ew, "\nRESULTS IN PROGRESS BY APP")
	w = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, a := range s.InProgressByApp {
		fmt.Fprintf(w, "  %s\t%d\n", a.App, a.Count)
	}
	if len(s.InProgressByApp) == 0 {
		fmt.Fprintln(w, "  none")
	}
	_ = w.Flush()

	t := s.Throughput
	fmt.Fprintln(ew, "\nRECENT THROUGHPUT")
	w = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  \tLAST HOUR\tLAST 24 HOURS\n")
	fmt.Fprintf(w, "  results reported\t%d\t%d\n", t.LastHour.ResultsReported, t.LastDay.ResultsReported)
	fmt.Fprintf(w, "  results validated\t%d\t%d\n", t.LastHour.ResultsValidated, t.LastDay.ResultsValidated)
	fmt.Fprintf(w, "  jobs assimilated\t%d\t%d\n", t.LastHour.JobsAssimilated, t.LastDay.JobsAssimilated)
	_ = w.Flush()

	fmt.Fprintln(ew, "\nRESULTS BY STATE")
	w = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  SERVER_STATE\tOUTCOME\tRESULTS\n")
	for _, r := range s.Results {
		fmt.Fprintf(w, "  %s\t%s\t%d\n", r.ServerState, r.Outcome, r.Count)
	}
	if len(s.Results) == 0 {
		fmt.Fprintf(w, "  -\t-\t0\n")
	}
	_ = w.Flush()

	wq, rq := s.Workunits, s.ResultFiles
	fmt.Fprintln(ew, "\nQUEUE DETAILS")
	w = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  QUEUE\tWORKUNITS\tRESULTS\n")
	fmt.Fprintf(w, "  total\t%d\t%d\n", wq.Total, rq.Total)
	fmt.Fprintf(w, "  need transition\t%d\t-\n", wq.NeedTransition)
	fmt.Fprintf(w, "  need validation\t%d\t-\n", wq.NeedValidate)
	fmt.Fprintf(w, "  need assimilation\t%d\t-\n", wq.NeedAssimilate)
	fmt.Fprintf(w, "  need file deletion\t%d\t%d\n", wq.FileDeleteReady, rq.FileDeleteReady)
	fmt.Fprintf(w, "  file deletion errors\t%d\t%d\n", wq.FileDeleteError, rq.FileDeleteError)
	fmt.Fprintf(w, "  files deleted (purge candidates)\t%d\t-\n", wq.FileDeleteDone)
	fmt.Fprintf(w, "  failed (error_mask set)\t%d\t-\n", wq.Failed)
	fmt.Fprintf(w, "  held (taskctl job requeue)\t%d\t-\n", wq.Held)
	_ = w.Flush()
	return ew.err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// errWriter keeps the first write error, so WriteText checks once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}
