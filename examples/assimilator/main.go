// Command assimilator (example) is a worked example of science code's own
// assimilator: a Go Handler plugged into the stock daemon with
// assimilator.Main. For each finished job it appends one row to
// <csv-dir>/batch_<n>.csv: the job's name, id, batch, status ("success" or
// its error names), and the SHA-256 and size of its canonical output. The
// daemon's flags (database, --app, --mod, --one-pass, ...) are the stock
// assimilator's; --csv-dir is its own.
//
//	go run ./examples/assimilator --app demo --csv-dir results-csv
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
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
)

func main() { assimilator.Main(program()) }

// program is the daemon: the stock assimilator with the CSV handler.
func program() assimilator.Program {
	return assimilator.Program{
		Usage: "append one CSV row per finished job (name, status, output SHA-256) to <csv-dir>/batch_<n>.csv",
		Flags: []cli.Flag{&cli.StringFlag{Name: "csv-dir", Value: "results-csv",
			Usage: "directory of the per-batch CSV files (relative to --project-dir)"}},
		Check: func(c *cli.Context) error {
			if c.String("csv-dir") == "" {
				return errors.New("--csv-dir is empty")
			}
			return nil
		},
		Handler: func(c *cli.Context, env daemon.Env) (assimilator.Handler, error) {
			return NewCSVHandler(env.Common.Path(c.String("csv-dir")), env.Common.UploadDir, env.Common.Fanout), nil
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
	dir, uploadDir string
	fanout         int

	mu sync.Mutex
	// jobs holds, per CSV file read so far, the names of the jobs in it.
	jobs map[string]map[string]bool
}

// NewCSVHandler returns a handler writing into dir and reading output files
// from uploadDir laid out with fan-out fan.
func NewCSVHandler(dir, uploadDir string, fan int) *CSVHandler {
	return &CSVHandler{dir: dir, uploadDir: uploadDir, fanout: fan, jobs: map[string]map[string]bool{}}
}

// Handle appends the job's row unless its file has it already.
func (h *CSVHandler) Handle(_ context.Context, wu row.Workunit, canonical *row.Result) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	path := filepath.Join(h.dir, fmt.Sprintf("batch_%d.csv", wu.Batch))
	jobs, err := h.open(path)
	if err != nil {
		return err
	}
	if jobs[wu.Name] {
		return nil
	}
	status, digest, size := wu.ErrorMask.String(), "", ""
	if canonical != nil {
		sum, n, err := h.digest(*canonical)
		if err != nil {
			return fmt.Errorf("job %s: %w", wu.Name, err)
		}
		status, digest, size = "success", sum, strconv.FormatInt(n, 10)
	}
	if err := appendRow(path, []string{wu.Name, strconv.FormatInt(wu.ID, 10), strconv.FormatInt(wu.Batch, 10),
		status, digest, size}); err != nil {
		// A failed append may have left part of a row: read the file
		// afresh next time, which cuts it off.
		delete(h.jobs, path)
		return err
	}
	jobs[wu.Name] = true
	return nil
}

// digest hashes the canonical instance's output files, in order.
func (h *CSVHandler) digest(r row.Result) (string, int64, error) {
	files, err := jobxml.ParseResult(r.XMLDocIn)
	if err != nil {
		return "", 0, fmt.Errorf("canonical result %d: %w", r.ID, err)
	}
	sum := sha256.New()
	var total int64
	for _, f := range files {
		path, err := fanout.Path(h.uploadDir, f.Name, h.fanout)
		if err != nil {
			return "", 0, err
		}
		in, err := os.Open(path)
		if err != nil {
			return "", 0, err // missing output: the assimilator retries later
		}
		n, err := io.Copy(sum, in)
		in.Close()
		if err != nil {
			return "", 0, fmt.Errorf("read %s: %w", path, err)
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
