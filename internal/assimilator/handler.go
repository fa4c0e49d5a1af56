package assimilator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store"
)

// Handler hands one finished job to the project. canonical is the job's
// canonical instance, nil for a job that failed (wu.ErrorMask says why). It
// must be idempotent: after a crash it is called again for the same job. An
// error leaves the job READY, to be handled again after a back-off; an error
// wrapping context.DeadlineExceeded counts as a timeout. Handle is called
// from one goroutine at a time, and never for a known-answer job.
type Handler interface {
	Handle(ctx context.Context, wu store.Workunit, canonical *store.Result) error
}

// ErrorSuffix ends the name of the file that records a failed job.
const ErrorSuffix = ".error"

// FileHandler stores each job's outcome as files in a results directory:
// <Dir>/<job name> holds the canonical instance's (first) output file, and
// <Dir>/<job name>.<i> its output file i for i >= 1; a failed job gets
// <Dir>/<job name>.error holding the names of its error bits.
type FileHandler struct {
	// Dir is the results directory, created if missing.
	Dir string
	// UploadDir and Fanout locate output files (see package fanout).
	UploadDir string
	Fanout    int
}

// Handle writes the job's result files.
func (h FileHandler) Handle(_ context.Context, wu store.Workunit, canonical *store.Result) error {
	if err := fanout.ValidName(wu.Name); err != nil {
		return fmt.Errorf("job name: %w", err)
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return fmt.Errorf("create results directory: %w", err)
	}
	if canonical == nil {
		body := strings.NewReader(wu.ErrorMask.String() + "\n")
		return writeAtomic(h.Dir, wu.Name+ErrorSuffix, body)
	}
	files, err := jobxml.ParseResult(canonical.XMLDocIn)
	if err != nil {
		return fmt.Errorf("canonical result %d: %w", canonical.ID, err)
	}
	if len(files) == 0 {
		return writeAtomic(h.Dir, wu.Name, strings.NewReader(""))
	}
	for i, f := range files {
		src, err := fanout.Path(h.UploadDir, f.Name, h.Fanout)
		if err != nil {
			return fmt.Errorf("canonical result %d: %w", canonical.ID, err)
		}
		in, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("canonical result %d output: %w", canonical.ID, err)
		}
		name := wu.Name
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		err = writeAtomic(h.Dir, name, in)
		in.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic makes dir/name hold exactly what src gives: written to a
// temporary file in the same directory, synced, then renamed over name, so
// a reader (or a crash) sees the old file or the whole new one, never part.
func writeAtomic(dir, name string, src io.Reader) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	cleanup := func() { tmp.Close(); os.Remove(tmp.Name()) }
	if _, err := io.Copy(tmp, src); err != nil {
		cleanup()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		cleanup()
		return fmt.Errorf("write %s: sync: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	// The rename is durable only once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", name, err)
	}
	return nil
}
