package simreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// File names WriteDir writes.
const (
	JSONFile = "report.json"
	TextFile = "report.txt"
	SVGFile  = "shares.svg"
)

// WriteDir creates dir (and its parents) and writes report.json (indented),
// report.txt and shares.svg into it. Each file is written to a temporary
// file in dir and renamed into place, so a reader never sees half a report.
func (r Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js) // Encode ends with the newline files want
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	var txt, svg bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		return err
	}
	if err := r.WriteSVG(&svg); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{JSONFile, js.Bytes()}, {TextFile, txt.Bytes()}, {SVGFile, svg.Bytes()}} {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
