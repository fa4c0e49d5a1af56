package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFilesSyncsEveryPathAndReportsTheMissing(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range 40 {
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	paths = append(paths, dir) // a directory is synced like a file
	if err := Files(paths); err != nil {
		t.Fatalf("Files(%d existing paths) = %v, want nil", len(paths), err)
	}
	if err := Files(nil); err != nil {
		t.Fatalf("Files(nil) = %v, want nil", err)
	}
	missing := filepath.Join(dir, "gone")
	err := Files(append(paths[:20:20], missing))
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Files with %s missing = %v, want an error naming it", missing, err)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	if err := Dir(dir); err != nil {
		t.Fatalf("Dir(%s) = %v", dir, err)
	}
	missing := filepath.Join(dir, "gone")
	if err := Dir(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Dir(%s) = %v, want an error naming it", missing, err)
	}
}
