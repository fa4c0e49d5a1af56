package workgenerator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// counter is the content of the counter file; see the package comment.
type counter struct {
	App     string   `json:"app"`
	Created int64    `json:"created"`
	Pending *pending `json:"pending,omitempty"`
}

// pending is a batch whose transaction may or may not have committed.
type pending struct {
	Jobs      int64  `json:"jobs"`
	FirstName string `json:"first_name"`
	// Names are the batch's job names, whose input files are removed if
	// the batch did not commit.
	Names []string `json:"names,omitempty"`
}

// CounterPath is the counter file of app under the project directory.
func CounterPath(projectDir, app string) string {
	return filepath.Join(projectDir, "work_generator."+app+".count")
}

// readCounter returns the file's content; a missing file is a zero count.
func readCounter(path string) (counter, error) {
	var c counter
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read counter file: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("counter file %s: %w", path, err)
	}
	if c.Created < 0 || (c.Pending != nil && (c.Pending.Jobs < 0 || c.Pending.FirstName == "")) {
		return c, fmt.Errorf("counter file %s: inconsistent content", path)
	}
	return c, nil
}

// writeCounter replaces the file atomically and durably.
func writeCounter(path string, c counter) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode counter: %w", err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write counter file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write counter file %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync counter directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync counter directory: %w", err)
	}
	return nil
}
