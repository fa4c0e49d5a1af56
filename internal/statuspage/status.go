package statuspage

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Status is the whole report. The HTML page, /status.json and `taskctl
// status --json` all show this one value.
type Status struct {
	// Time is the Unix time the counts were taken at.
	Time int64 `json:"time"`
	// Daemons are the configured daemons' health, in configuration order.
	Daemons []Daemon `json:"daemons"`
	// Queues is the work waiting on each daemon.
	Queues Queues `json:"queues"`
	// InProgressByApp splits Queues.InProgressResults by app.
	InProgressByApp []AppCount `json:"in_progress_by_app"`
	// Throughput is what the project finished recently.
	Throughput Throughput `json:"throughput"`

	// Results, Workunits and ResultFiles are the detailed counts `taskctl
	// status` has always printed; scripts read their keys.
	Results     []ResultCount    `json:"results"`
	Workunits   WorkunitCounts   `json:"workunits"`
	ResultFiles ResultFileCounts `json:"result_files"`
}

// Daemon is one configured daemon replica as its admin listener shows it.
type Daemon struct {
	// Name is the replica's name ("validator@1").
	Name    string `json:"name"`
	Program string `json:"program"`
	// Address is the /healthz and /metrics listener; empty when the
	// configuration gives none.
	Address string `json:"address"`
	// State is StateUp, StateFailing, StateDown or StateUnknown.
	State string `json:"state"`
	// Error says why the daemon is not up.
	Error string `json:"error,omitempty"`
	// LastSuccessTime is the Unix time of the daemon's last successful pass
	// (its taskserver_<program>_last_success_timestamp_seconds); 0 when it
	// exports none or has not finished a pass yet.
	LastSuccessTime float64 `json:"last_success_time"`
	// LastSuccessAgeSeconds is Status.Time minus LastSuccessTime; null
	// when LastSuccessTime is 0.
	LastSuccessAgeSeconds *float64 `json:"last_success_age_seconds"`
}

// The daemon states.
const (
	// StateUp: /healthz answered 200.
	StateUp = "up"
	// StateFailing: the process answers but /healthz says it is unhealthy
	// (for example the database is unreachable).
	StateFailing = "failing"
	// StateDown: nothing answered at the address.
	StateDown = "down"
	// StateUnknown: the configuration gives no address to ask.
	StateUnknown = "unknown"
)

// Queues is the work waiting on each daemon, as the backlog list
// names it.
type Queues struct {
	// UnsentResults wait for the feeder and the scheduler.
	UnsentResults int64 `json:"unsent_results"`
	// InProgressResults are on hosts.
	InProgressResults int64 `json:"in_progress_results"`
	// JobsDueTransition have transition_time <= now.
	JobsDueTransition int64 `json:"jobs_due_transition"`
	// OldestDueTransitionAgeSeconds is now minus the earliest due
	// transition_time: how far the transitioner is behind; 0 when none is
	// due.
	OldestDueTransitionAgeSeconds int64 `json:"oldest_due_transition_age_seconds"`
	// JobsAwaitingValidation have need_validate set.
	JobsAwaitingValidation int64 `json:"jobs_awaiting_validation"`
	// JobsAwaitingAssimilation have assimilate_state READY.
	JobsAwaitingAssimilation int64 `json:"jobs_awaiting_assimilation"`
	// JobFilesAwaitingDeletion and ResultFilesAwaitingDeletion have
	// file_delete_state READY.
	JobFilesAwaitingDeletion    int64 `json:"job_files_awaiting_deletion"`
	ResultFilesAwaitingDeletion int64 `json:"result_files_awaiting_deletion"`
	// JobsFailed have an error_mask; JobsHeld wait for `taskctl job
	// requeue`.
	JobsFailed int64 `json:"jobs_failed"`
	JobsHeld   int64 `json:"jobs_held"`
}

// AppCount is a count for one app.
type AppCount struct {
	App   string `json:"app"`
	Count int64  `json:"count"`
}

// Throughput is the work finished in the last hour and the last day.
type Throughput struct {
	LastHour Window `json:"last_hour"`
	LastDay  Window `json:"last_day"`
}

// Window is the work finished in one window ending at Status.Time, as the
// scheduler, the validator and the assimilator counted it when it happened
// (store.ThroughputCount): by the minute, and including rows db_purge has
// deleted since.
type Window struct {
	ResultsReported  int64 `json:"results_reported"`
	ResultsValidated int64 `json:"results_validated"`
	JobsAssimilated  int64 `json:"jobs_assimilated"`
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

// Collect gathers the status at now: the database counts and, meanwhile,
// a probe of every target through client, each bounded by probeTimeout. A
// daemon that does not answer is reported, not an error; a database error
// is.
func Collect(ctx context.Context, st *store.Store, targets []Target, client *http.Client, probeTimeout time.Duration, now time.Time) (Status, error) {
	s := Status{Time: now.Unix(), Daemons: make([]Daemon, len(targets))}
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { s.Daemons[i] = probe(ctx, client, probeTimeout, t, now) })
	}
	err := collectDB(ctx, st, &s, now.Unix())
	wg.Wait()
	return s, err
}

func collectDB(ctx context.Context, st *store.Store, s *Status, now int64) error {
	// Every count but the due jobs comes from the count tables (schema
	// 10): a few hundred rows however big the tables are.
	c, err := st.CountsRead(ctx)
	if err != nil {
		return err
	}
	s.Results = []ResultCount{}
	for _, r := range c.ResultsByState() {
		s.Results = append(s.Results, ResultCount{ServerState: r.ServerState.String(), Outcome: r.Outcome.String(), Count: r.Count})
		switch r.ServerState {
		case state.ServerUnsent:
			s.Queues.UnsentResults += r.Count
		case state.ServerInProgress:
			s.Queues.InProgressResults += r.Count
		}
	}
	wq, err := st.WorkunitQueues(ctx, c, now)
	if err != nil {
		return err
	}
	s.Workunits = WorkunitCounts(wq)
	rq := c.ResultQueues()
	s.ResultFiles = ResultFileCounts(rq)
	s.Queues.JobsDueTransition = wq.NeedTransition
	s.Queues.JobsAwaitingValidation = wq.NeedValidate
	s.Queues.JobsAwaitingAssimilation = wq.NeedAssimilate
	s.Queues.JobFilesAwaitingDeletion = wq.FileDeleteReady
	s.Queues.ResultFilesAwaitingDeletion = rq.FileDeleteReady
	s.Queues.JobsFailed = wq.Failed
	s.Queues.JobsHeld = wq.Held
	oldest, ok, err := st.WorkunitOldestDue(ctx, now, 1, 0)
	if err != nil {
		return err
	}
	if ok {
		s.Queues.OldestDueTransitionAgeSeconds = max(now-oldest, 0)
	}
	apps, err := st.AppList(ctx)
	if err != nil {
		return err
	}
	s.InProgressByApp = inProgressByApp(c.ResultsByApp(state.ServerInProgress), apps)
	t, err := st.ThroughputCount(ctx, store.ThroughputParams{HourAgo: now - 3600, DayAgo: now - 86400})
	if err != nil {
		return err
	}
	s.Throughput = Throughput{
		LastHour: Window{ResultsReported: t.Hour.Reported, ResultsValidated: t.Hour.Validated, JobsAssimilated: t.Hour.Assimilated},
		LastDay:  Window{ResultsReported: t.Day.Reported, ResultsValidated: t.Day.Validated, JobsAssimilated: t.Day.Assimilated},
	}
	return nil
}

// inProgressByApp names the apps of byApp (app id to count), "app <id>"
// for one no longer listed, in name order.
func inProgressByApp(byApp map[int64]int64, apps []row.App) []AppCount {
	names := make(map[int64]string, len(apps))
	for _, a := range apps {
		names[a.ID] = a.Name
	}
	out := make([]AppCount, 0, len(byApp))
	for id, n := range byApp {
		name, ok := names[id]
		if !ok {
			name = fmt.Sprintf("app %d", id)
		}
		out = append(out, AppCount{App: name, Count: n})
	}
	slices.SortFunc(out, func(a, b AppCount) int { return strings.Compare(a.App, b.App) })
	return out
}
