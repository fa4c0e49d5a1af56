package statuspage

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
)

// Target is one daemon replica to ask about its health.
type Target struct {
	// Name is the replica's name ("validator@1").
	Name    string
	Program string
	// Address is host:port of its /healthz and /metrics listener; empty
	// when unknown (the daemon is shown as StateUnknown).
	Address string
}

// Targets lists the replicas of a configuration file's daemons section,
// in order: the daemons the supervisor runs.
func Targets(configBody []byte) ([]Target, error) {
	specs, err := config.Daemons(configBody)
	if err != nil {
		return nil, fmt.Errorf("daemons: %w", err)
	}
	var out []Target
	for _, d := range specs {
		for _, r := range d.Expand() {
			out = append(out, Target{Name: r.Name, Program: r.Program, Address: r.Listen})
		}
	}
	return out, nil
}

// maxMetricsBytes bounds how much of a /metrics answer is read: a daemon's
// is tens of kilobytes.
const maxMetricsBytes = 4 << 20

// probe asks t's /healthz and then its /metrics, each within timeout.
func probe(ctx context.Context, client *http.Client, timeout time.Duration, t Target, now time.Time) Daemon {
	d := Daemon{Name: t.Name, Program: t.Program, Address: t.Address}
	if t.Address == "" {
		d.State, d.Error = StateUnknown, "no listen address in the daemons section"
		return d
	}
	code, body, err := get(ctx, client, timeout, "http://"+t.Address+"/healthz", 4096)
	switch {
	case err != nil:
		d.State, d.Error = StateDown, err.Error()
		return d
	case code == http.StatusOK:
		d.State = StateUp
	default:
		d.State = StateFailing
		d.Error = fmt.Sprintf("/healthz: %d %s", code, strings.TrimSpace(firstLine(body)))
	}
	code, body, err = get(ctx, client, timeout, "http://"+t.Address+"/metrics", maxMetricsBytes)
	if err != nil || code != http.StatusOK {
		return d // health is what matters; the age stays unknown
	}
	if v, ok := lastSuccess(body, t.Program); ok && v > 0 {
		d.LastSuccessTime = v
		age := max(float64(now.UnixNano())/1e9-v, 0)
		d.LastSuccessAgeSeconds = &age
	}
	return d
}

func get(ctx context.Context, client *http.Client, timeout time.Duration, url string, limit int64) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	// The text format: it is what lastSuccess reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", url, err)
	}
	return resp.StatusCode, string(b), nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// lastSuccessSuffix ends the loop gauge every daemon exports (package
// daemon's LoopMetrics).
const lastSuccessSuffix = "_last_success_timestamp_seconds"

// lastSuccess finds the last-success gauge in a Prometheus text exposition:
// taskserver_<program>_last_success_timestamp_seconds, or, when the program
// exports it under another subsystem name, the newest gauge with that
// suffix.
func lastSuccess(metrics, program string) (float64, bool) {
	want := daemon.Namespace + "_" + program + lastSuccessSuffix
	var best float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, daemon.Namespace+"_") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			// Labels may hold spaces: the value follows the closing brace.
			if j := strings.LastIndexByte(line, '}'); j >= 0 {
				rest = line[j+1:]
			}
		}
		if !strings.HasSuffix(name, lastSuccessSuffix) {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		if name == want {
			return v, true
		}
		if !found || v > best {
			best, found = v, true
		}
	}
	return best, found
}
