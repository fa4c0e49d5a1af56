package outputfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
)

// Permits authorise the uploads of tasks that hold no upload certificate.
//
// A BOINC project made by make_project neither signs uploads
// (dont_generate_upload_certificates) nor checks them
// (ignore_upload_certificates), so the tasks on volunteers' machines when
// such a project moves over carry no certificate, and our data server
// refuses an upload without one. `taskctl import boinc` therefore writes a
// permit for each output of every imported instance that is in progress
// and whose document has no certificate: the output's name, its size
// limit, and an expiry (the instance's report deadline plus the upload
// grace, as a certificate signed when it was sent would have). The data
// server accepts an upload that has no certificate only under a permit,
// within its size limit and before its expiry; everything else about the
// upload (append only, nothing written to a finished or closed file) is as
// for any other. No other program writes permits, so only the imported
// tasks' output names are open, and only until their deadlines.
//
// Permits live in PermitDir under the upload directory, one file per
// fan-out bucket (named as package fanout names the bucket, so the
// orphan sweep, which walks the buckets themselves, never sees them), a
// line per output: name, max_nbytes, expiry (Unix seconds), separated by
// tabs, which no valid file name holds. A bucket's file is small (the
// imported outputs over the fan-out) and read only for an upload without
// a certificate. They are left in place when they expire: the directory
// can be removed once the last imported deadline and its grace are past.

// PermitDir is the directory of permits under the upload directory.
const PermitDir = ".import-permits"

// Permit authorises uploads of the output Name without a certificate.
type Permit struct {
	Name string
	// MaxNbytes bounds the file, whatever the upload claims.
	MaxNbytes int64
	// Expires is the last second (Unix) an upload is accepted.
	Expires int64
}

// permitRel is the file, relative to the upload directory, that holds the
// permit of name.
func permitRel(name string, fan int) string {
	return PermitDir + "/" + fanout.Dir(name, fan)
}

// WritePermits adds ps to the permits under uploadDir, replacing any of the
// same name: running it again with the same permits changes nothing. Each
// bucket's file is replaced whole (written aside, synced, renamed), so a
// crash leaves it as it was or as it is to be, never half written.
func WritePermits(uploadDir string, fan int, ps []Permit) error {
	byFile := map[string][]Permit{}
	for _, p := range ps {
		if err := fanout.ValidName(p.Name); err != nil {
			return fmt.Errorf("upload permit: %w", err)
		}
		if p.MaxNbytes <= 0 {
			return fmt.Errorf("upload permit %s: max_nbytes %d: want > 0", p.Name, p.MaxNbytes)
		}
		rel := permitRel(p.Name, fan)
		byFile[rel] = append(byFile[rel], p)
	}
	if len(byFile) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(uploadDir, PermitDir), 0o755); err != nil {
		return fmt.Errorf("upload permits: %w", err)
	}
	for rel, add := range byFile {
		path := filepath.Join(uploadDir, filepath.FromSlash(rel))
		have, err := readPermitFile(path)
		if err != nil {
			return err
		}
		for _, p := range add {
			have[p.Name] = p
		}
		if err := writePermitFile(path, have); err != nil {
			return err
		}
	}
	return nil
}

func readPermitFile(path string) (map[string]Permit, error) {
	out := map[string]Permit{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("upload permits: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		p, err := parsePermit(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("upload permits %s: %w", path, err)
		}
		out[p.Name] = p
	}
	return out, sc.Err()
}

func writePermitFile(path string, ps map[string]Permit) error {
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		p := ps[n]
		fmt.Fprintf(&b, "%s\t%d\t%d\n", p.Name, p.MaxNbytes, p.Expires)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("upload permits: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("upload permits: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("upload permits: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("upload permits: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("upload permits: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("upload permits: %w", err)
	}
	return nil
}

func parsePermit(line string) (Permit, error) {
	f := strings.Split(line, "\t")
	if len(f) != 3 {
		return Permit{}, fmt.Errorf("line %q: want name, max_nbytes and expiry separated by tabs", line)
	}
	maxNbytes, err1 := strconv.ParseInt(f[1], 10, 64)
	exp, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil || maxNbytes <= 0 {
		return Permit{}, fmt.Errorf("line %q: bad max_nbytes or expiry", line)
	}
	return Permit{Name: f[0], MaxNbytes: maxNbytes, Expires: exp}, nil
}

// FindPermit returns the permit of the output name in the upload directory
// root, and false when there is none. A permit file that cannot be read or
// parsed is an error: the upload is then to be retried, not refused.
func FindPermit(root *os.Root, fan int, name string) (Permit, bool, error) {
	f, err := root.Open(permitRel(name, fan))
	if errors.Is(err, fs.ErrNotExist) {
		return Permit{}, false, nil
	}
	if err != nil {
		return Permit{}, false, fmt.Errorf("upload permits: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	prefix := name + "\t"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		p, err := parsePermit(line)
		if err != nil {
			return Permit{}, false, fmt.Errorf("upload permits: %w", err)
		}
		return p, true, nil
	}
	if err := sc.Err(); err != nil {
		return Permit{}, false, fmt.Errorf("upload permits: %w", err)
	}
	return Permit{}, false, nil
}
