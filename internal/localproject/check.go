package localproject

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/simreport"
)

// Progress is a snapshot of the project while it runs.
type Progress struct {
	JobsLive    int // workunit rows
	Unsent      int
	InProgress  int
	Over        int
	Assimilated int // jobs with an outcome in the results folder
	Archived    int // workunits in archive files
}

func (p Progress) String() string {
	return fmt.Sprintf("jobs in db %d | instances unsent %d, in progress %d, over %d | jobs assimilated %d, purged %d",
		p.JobsLive, p.Unsent, p.InProgress, p.Over, p.Assimilated, p.Archived)
}

func (p *project) progress(ctx context.Context) (Progress, error) {
	var pg Progress
	c, err := projectrun.CountLive(ctx, p.st.DB())
	if err != nil {
		return pg, err
	}
	pg.JobsLive, pg.Unsent, pg.InProgress, pg.Over = c.Jobs, c.Unsent, c.InProgress, c.Over
	entries, err := os.ReadDir(filepath.Join(p.opts.ProjectDir, "results"))
	if err != nil {
		return pg, err
	}
	for _, e := range entries {
		// A job's outputs directory, or its .error file; not a file on its
		// way to its name.
		if !strings.HasPrefix(e.Name(), ".") && !strings.HasSuffix(e.Name(), "%tmp") {
			pg.Assimilated++
		}
	}
	wus, _, err := projectrun.ReadArchives(filepath.Join(p.opts.ProjectDir, "archives"), true)
	if err != nil {
		return pg, err
	}
	pg.Archived = len(wus)
	return pg, nil
}

// Summary is what flowed through a run and what its checks found.
type Summary struct {
	JobsCreated      int `json:"jobs_created"`
	InstancesSent    int `json:"instances_sent"`
	Reported         int `json:"reported"`
	Valid            int `json:"valid"`
	Invalid          int `json:"invalid"`
	JobsAssimilated  int `json:"jobs_assimilated"`
	JobsErrored      int `json:"jobs_errored"`
	JobsPurged       int `json:"jobs_purged"`
	JobsUnfinished   int `json:"jobs_unfinished"`
	FilesLeft        int `json:"files_left"` // input and output files, not live shared files
	SameUserTwice    int `json:"same_user_twice"`
	WrongOutputs     int `json:"wrong_outputs"`
	DoubleOutcome    int `json:"double_outcome"`
	MissingOutcome   int `json:"missing_outcome"`
	DoubleArchived   int `json:"double_archived"`
	Violations       []string
	InstancesCreated int `json:"instances_created"`
	// The volunteers' file transfers (from the simulated client's
	// report): input files downloaded, those fetched gzip'd, sticky
	// inputs taken from a host's copy instead, output files uploaded.
	FilesDownloaded  int64 `json:"files_downloaded"`
	GzippedDownloads int64 `json:"gzipped_downloads"`
	StickyReused     int64 `json:"sticky_reused"`
	FilesUploaded    int64 `json:"files_uploaded"`
	// TricklesSent are the trickle-ups the apps sent; TricklesStored and
	// TricklesHandled the msg_from_host rows and those handled.
	TricklesSent    int64 `json:"trickles_sent"`
	TricklesStored  int   `json:"trickles_stored"`
	TricklesHandled int   `json:"trickles_handled"`
	// Hardware is what the simulated hosts had and how busy they kept it
	// (GPU and multi-core hosts, GPU and multi-threaded tasks).
	Hardware simreport.Hardware `json:"hardware"`
}

// OK reports whether no invariant broke.
func (s Summary) OK() bool { return len(s.Violations) == 0 }

func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jobs created      %d\n", s.JobsCreated)
	fmt.Fprintf(&b, "instances created %d\n", s.InstancesCreated)
	fmt.Fprintf(&b, "instances sent    %d\n", s.InstancesSent)
	fmt.Fprintf(&b, "reported          %d\n", s.Reported)
	fmt.Fprintf(&b, "valid             %d\n", s.Valid)
	fmt.Fprintf(&b, "invalid           %d\n", s.Invalid)
	fmt.Fprintf(&b, "jobs assimilated  %d\n", s.JobsAssimilated)
	fmt.Fprintf(&b, "jobs errored      %d\n", s.JobsErrored)
	fmt.Fprintf(&b, "jobs purged       %d\n", s.JobsPurged)
	fmt.Fprintf(&b, "jobs unfinished   %d\n", s.JobsUnfinished)
	fmt.Fprintf(&b, "files downloaded  %d (%d gzip'd; %d sticky inputs reused)\n", s.FilesDownloaded, s.GzippedDownloads, s.StickyReused)
	fmt.Fprintf(&b, "files uploaded    %d\n", s.FilesUploaded)
	fmt.Fprintf(&b, "trickle-ups       %d sent, %d stored, %d handled\n", s.TricklesSent, s.TricklesStored, s.TricklesHandled)
	fmt.Fprintf(&b, "hardware          %d GPU hosts (%d GPUs, %.0f%% busy, their CPUs %.0f%%), %d multi-core hosts; %d GPU tasks, %d multi-threaded tasks\n",
		s.Hardware.GPUHosts, s.Hardware.GPUs, 100*s.Hardware.GPUBusyFrac, 100*s.Hardware.GPUHostCPUBusyFrac, s.Hardware.MTHosts,
		s.Hardware.GPUTasks, s.Hardware.MTTasks)
	if s.OK() {
		b.WriteString("invariants        ok\n")
	} else {
		fmt.Fprintf(&b, "invariants        %d BROKEN:\n", len(s.Violations))
		for _, v := range s.Violations {
			fmt.Fprintf(&b, "  - %s\n", v)
		}
	}
	return b.String()
}

var wuCols = []string{"id", "name", "error_mask", "assimilate_state", "canonical_resultid", "file_delete_state"}
var resultCols = []string{"id", "workunitid", "userid", "server_state", "outcome", "validate_state", "sent_time", "received_time", "name"}

// summarize counts what flowed through, live rows and archived rows
// together, and checks the invariants.
func (p *project) summarize(ctx context.Context) (Summary, error) {
	var s Summary
	liveWU, err := projectrun.LiveRecords(ctx, p.st.DB(), "workunit", wuCols)
	if err != nil {
		return s, fmt.Errorf("read workunits: %w", err)
	}
	liveRes, err := projectrun.LiveRecords(ctx, p.st.DB(), "result", resultCols)
	if err != nil {
		return s, fmt.Errorf("read results: %w", err)
	}
	arcWU, arcRes, err := projectrun.ReadArchives(filepath.Join(p.opts.ProjectDir, "archives"), false)
	if err != nil {
		return s, err
	}
	violate := func(format string, args ...any) { s.Violations = append(s.Violations, fmt.Sprintf(format, args...)) }

	jobs := map[string]projectrun.Record{}
	archivedTimes := map[string]int{}
	for _, w := range arcWU {
		archivedTimes[w["name"]]++
		jobs[w["name"]] = w
	}
	for name, n := range archivedTimes {
		if n > 1 {
			s.DoubleArchived++
			violate("job %s archived %d times", name, n)
		}
	}
	s.JobsPurged = len(archivedTimes)
	for _, w := range liveWU {
		if _, dup := jobs[w["name"]]; dup {
			violate("job %s both archived and still in the database", w["name"])
		}
		jobs[w["name"]] = w
	}
	s.JobsCreated = len(jobs)

	results := map[string]projectrun.Record{}
	for _, r := range append(arcRes, liveRes...) {
		results[r["name"]] = r
	}
	s.InstancesCreated = len(results)
	perUser := map[[2]int64]int{}
	for _, r := range results {
		if r.Int("sent_time") > 0 {
			s.InstancesSent++
		}
		if r.Int("received_time") > 0 {
			s.Reported++
		}
		switch r.Int("validate_state") {
		case 1:
			s.Valid++
		case 2:
			s.Invalid++
		}
		if u := r.Int("userid"); u != 0 {
			perUser[[2]int64{r.Int("workunitid"), u}]++
		}
	}
	for k, n := range perUser {
		if n > 1 {
			s.SameUserTwice++
			violate("user %d got %d instances of job %d", k[1], n, k[0])
		}
	}

	resultsDir := filepath.Join(p.opts.ProjectDir, "results")
	for name, w := range jobs {
		okPath := filepath.Join(resultsDir, name, "out")
		errPath := filepath.Join(resultsDir, name+".error")
		out, okErr := os.ReadFile(okPath)
		_, errErr := os.Stat(errPath)
		hasOK, hasErr := okErr == nil, errErr == nil
		if hasOK && hasErr {
			s.DoubleOutcome++
			violate("job %s has both an output and an error record", name)
		}
		if hasOK && !bytes.Equal(out, demoapp.Output(name)) {
			s.WrongOutputs++
			violate("job %s: assimilated output is not the correct one", name)
		}
		// The log is not validated, but every volunteer writes the same
		// one, and it is delivered beside out.
		if log, err := os.ReadFile(filepath.Join(resultsDir, name, demoapp.LogName)); hasOK &&
			(err != nil || !bytes.Equal(log, demoapp.Log(demoapp.GeneratedFiles(name), demoapp.Rounds))) {
			s.WrongOutputs++
			violate("job %s: assimilated log is missing or not the demo app's (%v)", name, err)
		}
		if hasOK {
			s.JobsAssimilated++
			if w.Int("canonical_resultid") == 0 || w.Int("error_mask") != 0 {
				violate("job %s has an output but no canonical result or an error mask", name)
			}
		}
		if hasErr {
			s.JobsErrored++
			if w.Int("error_mask") == 0 {
				violate("job %s recorded as failed but its error_mask is 0", name)
			}
		}
		if w.Int("assimilate_state") == 2 && !hasOK && !hasErr {
			s.MissingOutcome++
			violate("job %s marked assimilated but nothing in %s", name, resultsDir)
		}
		if w.Int("assimilate_state") != 2 {
			s.JobsUnfinished++
		} else if w.Int("error_mask") == 0 && !hasOK {
			violate("job %s succeeded but its output is missing", name)
		}
	}
	msgs, err := projectrun.LiveRecords(ctx, p.st.DB(), "msg_from_host", []string{"id", "handled"})
	if err != nil {
		return s, fmt.Errorf("read trickle-ups: %w", err)
	}
	s.TricklesStored = len(msgs)
	for _, m := range msgs {
		if m.Int("handled") != 0 {
			s.TricklesHandled++
		}
	}
	// A live shared file (the demo model) is not left over: the file
	// deleter keeps it for --shared-file-grace after its last job.
	kept, err := projectrun.SharedFilesKept(ctx, p.st.DB())
	if err != nil {
		return s, err
	}
	for _, d := range []string{"download", "upload"} {
		left, err := outputfile.ListLeft(filepath.Join(p.opts.ProjectDir, d), time.Now())
		if err != nil {
			return s, err
		}
		s.FilesLeft += len(projectrun.Unkept(left, kept))
	}
	return s, nil
}
