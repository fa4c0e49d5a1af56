package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Report is what the status command shows: the supervisor and each
// replica, with the replica's health as its /healthz answers.
type Report struct {
	Running bool           `json:"running"`
	PID     int            `json:"pid,omitempty"`
	Listen  string         `json:"listen,omitempty"`
	Since   time.Time      `json:"started_at"`
	Daemons []DaemonReport `json:"daemons"`
}

// DaemonReport is one replica's line in a Report.
type DaemonReport struct {
	DaemonState
	// UptimeSeconds is how long the running process has been up (0 when it
	// is not running).
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Health is "ok", the /healthz error ("503 3 consecutive passes
	// failed, last: …", its first line), "unreachable", or "" when the
	// replica has no listen address or is not running.
	Health string `json:"health,omitempty"`
}

// OK reports whether the supervisor and every replica run, and every
// replica with a listen address answers /healthz with 200.
func (r Report) OK() bool {
	if !r.Running {
		return false
	}
	for _, d := range r.Daemons {
		if d.State != StateRunning || (d.Listen != "" && d.Health != "ok") {
			return false
		}
	}
	return true
}

// Status reads the project's state and asks every running replica with a
// listen address for its /healthz. A project whose supervisor is not
// running yields a Report with Running false and the last state it wrote.
func Status(ctx context.Context, paths Paths) (Report, error) {
	var r Report
	pid, err := Running(paths.PIDFile())
	switch {
	case errors.Is(err, ErrNotRunning):
	case err != nil:
		return r, err
	default:
		r.Running, r.PID = true, pid
	}
	st, err := ReadState(paths.StateFile())
	if err != nil {
		if !r.Running {
			return r, nil // never started here
		}
		return r, err
	}
	if r.Running && st.PID != pid {
		return r, fmt.Errorf("state file %s is from pid %d, not the running supervisor %d", paths.StateFile(), st.PID, pid)
	}
	r.Listen, r.Since = st.Listen, st.StartedAt
	now := time.Now()
	client := &http.Client{Timeout: 2 * time.Second}
	var wg sync.WaitGroup
	r.Daemons = make([]DaemonReport, len(st.Daemons))
	for i, d := range st.Daemons {
		dr := DaemonReport{DaemonState: d}
		if !r.Running && d.State != StateStopped {
			dr.State = StateStopped // the supervisor died without saying so
		}
		if dr.State == StateRunning && d.StartedAt != nil {
			dr.UptimeSeconds = now.Sub(*d.StartedAt).Seconds()
		}
		r.Daemons[i] = dr
		if dr.State == StateRunning && d.Listen != "" {
			wg.Go(func() { r.Daemons[i].Health = health(ctx, client, d.Listen) })
		}
	}
	wg.Wait()
	return r, nil
}

func health(ctx context.Context, client *http.Client, addr string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return "unreachable"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode == http.StatusOK {
		return "ok"
	}
	// The first line: one row of the status table per replica.
	why, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(why))
}

// WriteTable prints the report as a table.
func (r Report) WriteTable(w io.Writer) error {
	if r.Running {
		fmt.Fprintf(w, "supervisor running (pid %d, since %s", r.PID, r.Since.Format(time.RFC3339))
		if r.Listen != "" {
			fmt.Fprintf(w, ", http://%s", r.Listen)
		}
		fmt.Fprintln(w, ")")
	} else {
		fmt.Fprintln(w, "supervisor not running")
	}
	if len(r.Daemons) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPID\tSTATE\tRESTARTS\tUPTIME\tHEALTH\tLAST EXIT")
	for _, d := range r.Daemons {
		pid, up, h := "-", "-", d.Health
		if d.PID > 0 {
			pid = fmt.Sprint(d.PID)
		}
		if d.UptimeSeconds > 0 {
			up = (time.Duration(d.UptimeSeconds) * time.Second).String()
		}
		if h == "" {
			h = "-"
		}
		last := d.LastExit
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Name, pid, d.State, d.Restarts, up, h, last)
	}
	return tw.Flush()
}

// WriteJSON prints the report as JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Unclean lists the daemons that did not exit with status 0 after SIGTERM
// in a final state (killed after the grace period, or failed on the way
// out).
func Unclean(st State) []string {
	var out []string
	for _, d := range st.Daemons {
		if d.Killed || d.LastExitCode != 0 {
			out = append(out, fmt.Sprintf("%s: %s", d.Name, d.LastExit))
		}
	}
	return out
}
