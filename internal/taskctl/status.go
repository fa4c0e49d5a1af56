package taskctl

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
)

// Status is what "taskctl status" reports; --json prints it as is.
type Status struct {
	// Time is the Unix time the counts were taken at.
	Time      int64          `json:"time"`
	Results   []ResultCount  `json:"results"`
	Workunits WorkunitCounts `json:"workunits"`
	// ResultFiles counts results waiting for, or failed by, the file
	// deleter.
	ResultFiles ResultFileCounts `json:"result_files"`
}

// ResultCount is the number of results in one state and outcome.
type ResultCount struct {
	ServerState string `json:"server_state"`
	Outcome     string `json:"outcome"`
	Count       int64  `json:"count"`
}

// WorkunitCounts are the job queues.
type WorkunitCounts struct {
	Total           int64 `json:"total"`
	NeedTransition  int64 `json:"need_transition"`
	NeedValidate    int64 `json:"need_validate"`
	NeedAssimilate  int64 `json:"need_assimilate"`
	FileDeleteReady int64 `json:"file_delete_ready"`
	FileDeleteError int64 `json:"file_delete_error"`
	FileDeleteDone  int64 `json:"file_delete_done"`
	Failed          int64 `json:"failed"`
	Held            int64 `json:"held"`
}

// ResultFileCounts are the results' file-deletion queues.
type ResultFileCounts struct {
	Total           int64 `json:"total"`
	FileDeleteReady int64 `json:"file_delete_ready"`
	FileDeleteError int64 `json:"file_delete_error"`
}

func (t *tool) statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show queue counts: results by state and outcome, jobs waiting on each daemon",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}},
		Action: func(c *cli.Context) error {
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				s, err := collectStatus(ctx, st, t.now().Unix())
				if err != nil {
					return err
				}
				if c.Bool("json") {
					enc := json.NewEncoder(t.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(s)
				}
				return t.printStatus(s)
			})
		},
	}
}

func collectStatus(ctx context.Context, st *store.Store, now int64) (Status, error) {
	s := Status{Time: now, Results: []ResultCount{}}
	byState, err := st.ResultCountByState(ctx)
	if err != nil {
		return s, err
	}
	for _, r := range byState {
		s.Results = append(s.Results, ResultCount{ServerState: r.ServerState.String(), Outcome: r.Outcome.String(), Count: r.Count})
	}
	wq, err := st.WorkunitCountQueues(ctx, now)
	if err != nil {
		return s, err
	}
	s.Workunits = WorkunitCounts(wq)
	rq, err := st.ResultCountQueues(ctx)
	if err != nil {
		return s, err
	}
	s.ResultFiles = ResultFileCounts(rq)
	return s, nil
}

func (t *tool) printStatus(s Status) error {
	w := tabwriter.NewWriter(t.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "SERVER_STATE\tOUTCOME\tRESULTS\n")
	for _, r := range s.Results {
		fmt.Fprintf(w, "%s\t%s\t%d\n", r.ServerState, r.Outcome, r.Count)
	}
	if len(s.Results) == 0 {
		fmt.Fprintf(w, "-\t-\t0\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(t.stdout)
	wq, rq := s.Workunits, s.ResultFiles
	w = tabwriter.NewWriter(t.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "QUEUE\tWORKUNITS\tRESULTS\n")
	fmt.Fprintf(w, "total\t%d\t%d\n", wq.Total, rq.Total)
	fmt.Fprintf(w, "need transition\t%d\t-\n", wq.NeedTransition)
	fmt.Fprintf(w, "need validation\t%d\t-\n", wq.NeedValidate)
	fmt.Fprintf(w, "need assimilation\t%d\t-\n", wq.NeedAssimilate)
	fmt.Fprintf(w, "need file deletion\t%d\t%d\n", wq.FileDeleteReady, rq.FileDeleteReady)
	fmt.Fprintf(w, "file deletion errors\t%d\t%d\n", wq.FileDeleteError, rq.FileDeleteError)
	fmt.Fprintf(w, "files deleted (purge candidates)\t%d\t-\n", wq.FileDeleteDone)
	fmt.Fprintf(w, "failed (error_mask set)\t%d\t-\n", wq.Failed)
	fmt.Fprintf(w, "held (taskctl job requeue)\t%d\t-\n", wq.Held)
	return w.Flush()
}
