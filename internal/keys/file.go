package keys

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/taskserver/taskserver/internal/durable"
)

// ErrInsecureFile is returned by ReadPrivateFile for a key file that group
// or others may read or write: a leaked upload key lets anyone upload
// anything, a leaked code-signing key lets anyone run code on every host.
var ErrInsecureFile = errors.New("private key file is accessible to group or others")

// maxKeyFile bounds what a key reader reads; a key file is under 2 KB.
const maxKeyFile = 64 << 10

// WritePrivateFile writes k to path with mode 0600. It refuses to replace an
// existing file (the error wraps fs.ErrExist): a project whose code-signing
// key silently changes can no longer update its volunteers' apps.
func WritePrivateFile(path string, k *rsa.PrivateKey) error {
	return writePrivateText(path, FormatPrivate(k))
}

// writePrivateText writes a private key's text to a new file at path, mode
// 0600, never over an existing file.
func writePrivateText(path, text string) error {
	tmp, err := writeTemp(path, text, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	// A hard link fails if path exists, so the file appears complete or not
	// at all, and never over an older key.
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("write private key %s: %w", path, err)
	}
	return durable.Dir(filepath.Dir(path))
}

// ReadPrivateFile reads a private key file written by WritePrivateFile or by
// BOINC's crypt_prog. It refuses a file that group or others can access.
func ReadPrivateFile(path string) (*rsa.PrivateKey, error) {
	text, err := readPrivateText(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivate(text)
	if err != nil {
		return nil, fmt.Errorf("read private key %s: %w", path, err)
	}
	return k, nil
}

// readPrivateText reads a private key file, refusing one that group or
// others can access.
func readPrivateText(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read private key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read private key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("read private key %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("read private key %s (mode %04o, want 0600): %w", path, perm, ErrInsecureFile)
	}
	return readSmall(f, path)
}

// WritePublicFile writes k to path with mode 0644, replacing any file there
// in one step.
func WritePublicFile(path string, k *rsa.PublicKey) error {
	return writePublicText(path, FormatPublic(k))
}

// writePublicText writes a public key's text to path, mode 0644, replacing
// any file there in one step.
func writePublicText(path, text string) error {
	tmp, err := writeTemp(path, text, 0o644)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write public key %s: %w", path, err)
	}
	return durable.Dir(filepath.Dir(path))
}

// ReadPublicFile reads a public key file.
func ReadPublicFile(path string) (*rsa.PublicKey, error) {
	text, err := readPublicText(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePublic(text)
	if err != nil {
		return nil, fmt.Errorf("read public key %s: %w", path, err)
	}
	return k, nil
}

// readPublicText reads a public key file's text.
func readPublicText(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read public key: %w", err)
	}
	defer f.Close()
	return readSmall(f, path)
}

// writeTemp writes text to a new file beside path, synced, with mode perm,
// and returns its name.
func writeTemp(path, text string, perm fs.FileMode) (name string, err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", fmt.Errorf("write key %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return "", fmt.Errorf("write key %s: %w", path, err)
	}
	if _, err := io.WriteString(f, text); err != nil {
		return "", fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write key %s: %w", path, err)
	}
	return f.Name(), nil
}

func readSmall(f *os.File, path string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("read key %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("read key %s: %w: file larger than %d bytes", path, ErrBadKey, maxKeyFile)
	}
	return string(b), nil
}
