// Package fanout places project files in hashed sub-directories, as BOINC's
// dir_hier_path does, so that no directory grows to millions of entries. The
// sub-directory of a file is a pure function of its name and the fan-out, so
// every program finds a file without asking the database.
package fanout

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrBadName is returned for a file name that could escape its directory or
// is otherwise unusable.
var ErrBadName = errors.New("invalid file name")

// ValidName reports whether name is a plain file name: non-empty, at most
// 255 bytes, no path separators, no "..", no NUL or control characters, no
// '%' (the BOINC client rejects it).
func ValidName(name string) error {
	if name == "" || len(name) > 255 || name == "." || strings.Contains(name, "..") {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	for _, c := range []byte(name) {
		if c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == '%' {
			return fmt.Errorf("%w: %q", ErrBadName, name)
		}
	}
	return nil
}

// Dir returns the sub-directory name for a file: the md5 of its name, taken
// modulo fanout, in lower-case hex (BOINC's "%x" of the same bucket).
func Dir(name string, fanout int) string {
	if fanout <= 1 {
		return "0"
	}
	sum := md5.Sum([]byte(name))
	bucket := binary.BigEndian.Uint32(sum[:4]) % uint32(fanout)
	return fmt.Sprintf("%x", bucket)
}

// Rel returns the path of a file relative to its root: "dir/name".
func Rel(name string, fanout int) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return Dir(name, fanout) + "/" + name, nil
}

// Path returns the full path of a file under root.
func Path(root, name string, fanout int) (string, error) {
	rel, err := Rel(name, fanout)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), nil
}
