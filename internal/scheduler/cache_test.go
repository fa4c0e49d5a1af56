package scheduler

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/shmcache"
)

func TestCacheFileFollowsTheFeeder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	src := NewCacheFile(path)
	defer src.Close()
	if _, err := src.Current(); err == nil {
		t.Fatal("Current before the feeder made the file: no error, want one")
	}

	f1, err := shmcache.Create(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := src.Current()
	if err != nil || c1.NSlots() != 8 {
		t.Fatalf("Current after the feeder started = %v, %v; want the 8-slot cache", c1, err)
	}
	if c, _ := src.Current(); c != c1 {
		t.Fatal("Current mapped the file again although it was not replaced")
	}

	// The feeder restarts with another slot count: the file is replaced.
	f1.Close()
	f2, err := shmcache.Create(path, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	c2, err := src.Current()
	if err != nil || c2.NSlots() != 16 {
		t.Fatalf("Current after the feeder replaced the file = %v, %v; want the 16-slot cache", c2, err)
	}
}

func TestCacheFileRefusesUnknownLayout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a cache file ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	src := NewCacheFile(path)
	defer src.Close()
	if _, err := src.Current(); !errors.Is(err, shmcache.ErrLayout) {
		t.Fatalf("Current on a foreign file = %v, want ErrLayout", err)
	}
}
