// Command assimilator (example) is a worked example of a project's own
// assimilator: a Go Handler plugged into the stock daemon with
// assimilator.Main. For each finished job it appends one row to
// <csv-dir>/batch_<n>.csv: the job's name, id, batch, status ("success" or
// its error names), and the SHA-256 and size of its canonical output. The
// daemon's flags (database, --app, --mod, --one-pass, ...) are the stock
// assimilator's, without --handler and its options; --csv-dir is its own.
//
//	go run ./assimilator --config project.yaml --app demo --csv-dir results-csv
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/taskserver/taskserver/assimilator"
	"github.com/taskserver/taskserver/job"
)

func main() { assimilator.Main(program()) }

// program is the daemon: the stock assimilator with the CSV handler.
func program() assimilator.Program {
	return assimilator.Program{
		Usage: "append one CSV row per finished job (name, status, output SHA-256) to <csv-dir>/batch_<n>.csv",
		Flags: []job.Flag{{Name: "csv-dir", Value: "results-csv",
			Usage: "directory of the per-batch CSV files (relative to --project-dir)"}},
		NewHandler: func(env job.Env) (assimilator.Handler, error) {
			if env.Flags["csv-dir"] == "" {
				return nil, errors.New("--csv-dir is empty")
			}
			return NewCSVHandler(env.Path(env.Flags["csv-dir"])), nil
		},
	}
}

// header is the first row of every CSV file.
var header = []string{"job", "job_id", "batch", "status", "sha256", "bytes"}

// CSVHandler appends a row per job to a CSV file per batch. It is
// idempotent, as a Handler must be: a job already in its file (after a
// crash between the append and the job being marked done) is not appended
// again.
type CSVHandler struct {
	dir string

	mu sync.Mutex
	// jobs holds, per CSV file read so far, the names of the jobs in it.
	jobs map[string]map[string]bool
}

// NewCSVHandler returns a handler writing into dir.
func NewCSVHandler(dir string) *CSVHandler {
	return &CSVHandler{dir: dir, jobs: map[string]map[string]bool{}}
}

// Handle appends the job's row unless its file has it already.
func (h *CSVHandler) Handle(_ context.Context, j job.Job, canonical *job.Instance) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	path := filepath.Join(h.dir, fmt.Sprintf("batch_%d.csv", j.Batch))
	jobs, err := h.open(path)
	if err != nil {
		return err
	}
	if jobs[j.Name] {
		return nil
	}
	status, digest, size := strings.Join(j.Errors, "|"), "", ""
	if canonical != nil {
		sum, n, err := digestOutputs(canonical.Outputs)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
		status, digest, size = "success", sum, strconv.FormatInt(n, 10)
	}
	if err := appendRow(path, []string{j.Name, strconv.FormatInt(j.ID, 10), strconv.FormatInt(j.Batch, 10),
		status, digest, size}); err != nil {
		// A failed append may have left part of a row: read the file
		// afresh next time, which cuts it off.
		delete(h.jobs, path)
		return err
	}
	jobs[j.Name] = true
	return nil
}

// digestOutputs hashes the canonical instance's output files, in order.
func digestOutputs(outs []job.Output) (string, int64, error) {
	sum := sha256.New()
	var total int64
	for _, o := range outs {
		in, err := os.Open(o.Path)
		if err != nil {
			return "", 0, err // a file gone: the assimilator retries later
		}
		n, err := io.Copy(sum, in)
		in.Close()
		if err != nil {
			return "", 0, fmt.Errorf("read %s: %w", o.Path, err)
		}
		total += n
	}
	return hex.EncodeToString(sum.Sum(nil)), total, nil
}

// open returns the job names recorded in the CSV file at path, reading it
// the first time. A missing file is created with the header; a last line
// cut short by a crash is cut off (its job was not marked done, so it comes
// again).
func (h *CSVHandler) open(path string) (map[string]bool, error) {
	if jobs, ok := h.jobs[path]; ok {
		return jobs, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create csv directory: %w", err)
	}
	body, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	whole := body[:bytes.LastIndexByte(body, '\n')+1]
	if len(whole) != len(body) {
		if err := os.Truncate(path, int64(len(whole))); err != nil {
			return nil, fmt.Errorf("cut torn last line of %s: %w", path, err)
		}
	}
	jobs := map[string]bool{}
	if len(whole) == 0 {
		if err := appendRow(path, header); err != nil {
			return nil, err
		}
	} else {
		rows, err := csv.NewReader(bytes.NewReader(whole)).ReadAll()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		for _, row := range rows[1:] {
			jobs[row[0]] = true
		}
	}
	h.jobs[path] = jobs
	return jobs, nil
}

// appendRow appends one row to the file at path in a single write and syncs
// it, so the row is on disk before the job is marked done.
func appendRow(path string, row []string) error {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(row); err != nil {
		return fmt.Errorf("format row: %w", err)
	}
	w.Flush()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	return nil
}
