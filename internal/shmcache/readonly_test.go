package shmcache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

// TestOpenReadOnly reads slots and tables through a read-only mapping of a
// file the process may not write, and sees the feeder's later changes.
func TestOpenReadOnly(t *testing.T) {
	c, path := newCache(t, 4)
	if err := c.SetTables(Tables{Apps: []row.App{{ID: 3, Name: "demo"}}}); err != nil {
		t.Fatal(err)
	}
	if !c.Fill(1, entry(5)) {
		t.Fatal("Fill(1) failed")
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReadOnly(path)
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	defer r.Close()
	if got, ok := r.Peek(1); !ok || got != entry(5) {
		t.Fatalf("Peek(1) = %+v, %v; want %+v", got, ok, entry(5))
	}
	if tb, _, err := r.Tables(); err != nil || len(tb.Apps) != 1 || tb.Apps[0].Name != "demo" {
		t.Fatalf("Tables = %+v, %v", tb, err)
	}
	if !c.Fill(2, entry(6)) {
		t.Fatal("Fill(2) failed")
	}
	if _, ok := r.Peek(2); !ok || r.NSlots() != 4 {
		t.Fatalf("Peek(2) after the feeder filled it: %v; NSlots %d", ok, r.NSlots())
	}

	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, make([]byte, headerSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(other); !errors.Is(err, ErrLayout) {
		t.Fatalf("OpenReadOnly of a file that is no cache: %v, want ErrLayout", err)
	}
}
