package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/taskserver/taskserver/internal/keys"
)

// readRotationSignature returns the rotation signature beside the
// code-signing public key at keyPath (written by taskctl keys rotate), or ""
// if the project never rotated its key. Without it, clients holding an older
// key keep it and reject app files signed with the new one.
func readRotationSignature(keyPath string) (string, error) {
	path := filepath.Join(filepath.Dir(keyPath), keys.RotationSignatureFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read code-signing key rotation signature: %w", err)
	}
	sig := strings.TrimSpace(string(b))
	if sig == "" || !strings.HasSuffix(sig, ".") {
		return "", fmt.Errorf("code-signing key rotation signature %s: not a BOINC signature (hex lines ending with a \".\" line)", path)
	}
	return sig + "\n", nil
}
