package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/keys"
)

func TestReadRotationSignature(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub := filepath.Join(dir, "code_sign_public")
	if sig, err := readRotationSignature(pub); sig != "" || err != nil {
		t.Fatalf("readRotationSignature without a file = %q, %v; want none", sig, err)
	}
	path := filepath.Join(dir, keys.RotationSignatureFile)
	if err := os.WriteFile(path, []byte("00ff\n.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sig, err := readRotationSignature(pub); sig != "00ff\n.\n" || err != nil {
		t.Fatalf("readRotationSignature = %q, %v; want the file's signature", sig, err)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRotationSignature(pub); err == nil || !strings.Contains(err.Error(), "not a BOINC signature") {
		t.Fatalf("readRotationSignature of garbage = %v, want an error", err)
	}
}
