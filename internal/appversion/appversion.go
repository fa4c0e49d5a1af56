// Package appversion reads and writes app_version.xml_doc: the files of one
// build of an app, each with the code signature the BOINC client demands
// before it runs anything (PROTOCOL.md §5). taskctl writes the document when
// a version is added; the scheduler reads it to describe the version in its
// replies. An empty document is a version with no files, which only the
// simulated client (it runs the science in-process) can use.
//
// The package also holds the text format of signatures made offline
// (taskctl sign), so the code-signing private key never has to be on the
// server.
package appversion

import (
	"bufio"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
)

// File is one file of an app version, stored in the download directory
// under Name.
type File struct {
	// Name is unique across the project: clients keep every app file under
	// its name and never fetch one they already have.
	Name   string  `xml:"name"`
	Nbytes float64 `xml:"nbytes"`
	// MD5 is the file's md5, 32 lower-case hex characters.
	MD5 string `xml:"md5_cksum"`
	// Signature is the BOINC signature text of the file's bytes made with
	// the code-signing private key.
	Signature string `xml:"file_signature"`
	// MainProgram marks the file the client runs; exactly one has it.
	MainProgram bool `xml:"main_program"`
	// OpenName is the file's name in the slot directory; empty means Name.
	OpenName string `xml:"open_name,omitempty"`
	// CopyFile asks the client to copy the file into the slot instead of
	// writing a link file that only the BOINC API can follow.
	CopyFile bool `xml:"copy_file"`
}

type doc struct {
	XMLName xml.Name `xml:"app_version_files"`
	Files   []File   `xml:"file"`
}

// ErrInvalid is wrapped by every error about a document's content.
var ErrInvalid = errors.New("invalid app version files")

// FileName is the stored name of a version's file: <app>_<version>_<platform>
// for the main program, with _<base> appended for the others, so that files
// of different versions never collide.
func FileName(app string, versionNum int, platform, base string, main bool) string {
	name := app + "_" + strconv.Itoa(versionNum) + "_" + platform
	if !main {
		name += "_" + base
	}
	return name
}

// Format writes app_version.xml_doc for files, which must be valid (see
// Check).
func Format(files []File) (string, error) {
	if err := Check(files); err != nil {
		return "", err
	}
	b, err := xml.Marshal(doc{Files: files})
	if err != nil {
		return "", fmt.Errorf("format app version files: %w", err)
	}
	return string(b), nil
}

// Parse reads app_version.xml_doc. An empty document has no files; any
// other must be valid.
func Parse(text string) ([]File, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var d doc
	if err := xml.Unmarshal([]byte(text), &d); err != nil {
		return nil, fmt.Errorf("parse app version files: %w", err)
	}
	if err := Check(d.Files); err != nil {
		return nil, err
	}
	return d.Files, nil
}

// Check reports whether files can be sent to a client: at least one, names
// valid and unique, exactly one main program, an md5 and a signature on
// each.
func Check(files []File) error {
	if len(files) == 0 {
		return fmt.Errorf("%w: no files", ErrInvalid)
	}
	seen := map[string]bool{}
	mains := 0
	for _, f := range files {
		if err := fanout.ValidName(f.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if f.OpenName != "" {
			if err := fanout.ValidName(f.OpenName); err != nil {
				return fmt.Errorf("%w: open name of %s: %w", ErrInvalid, f.Name, err)
			}
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: file %s listed twice", ErrInvalid, f.Name)
		}
		seen[f.Name] = true
		if !isMD5(f.MD5) {
			return fmt.Errorf("%w: file %s: md5 %q is not 32 lower-case hex characters", ErrInvalid, f.Name, f.MD5)
		}
		if f.Nbytes < 0 {
			return fmt.Errorf("%w: file %s: nbytes %v", ErrInvalid, f.Name, f.Nbytes)
		}
		if strings.TrimSpace(f.Signature) == "" {
			return fmt.Errorf("%w: file %s has no signature", ErrInvalid, f.Name)
		}
		if f.MainProgram {
			mains++
		}
	}
	if mains != 1 {
		return fmt.Errorf("%w: %d main programs, want exactly 1", ErrInvalid, mains)
	}
	return nil
}

func isMD5(s string) bool {
	if len(s) != 32 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Signed is a signature made offline for one file.
type Signed struct {
	// Base is the file's base name as given to taskctl sign; taskctl
	// app-version add matches it with the base name of each --file.
	Base      string
	MD5       string
	Signature string
}

// FormatSignatures writes signatures as text: per file a line "<base>
// <md5>" followed by the signature block, which ends with a "." line.
func FormatSignatures(sigs []Signed) string {
	var b strings.Builder
	for _, s := range sigs {
		b.WriteString(s.Base + " " + s.MD5 + "\n")
		b.WriteString(strings.TrimSpace(s.Signature) + "\n")
	}
	return b.String()
}

// ParseSignatures reads what FormatSignatures wrote, keyed by base name.
func ParseSignatures(text string) (map[string]Signed, error) {
	out := map[string]Signed{}
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	var cur *Signed
	var sig strings.Builder
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if cur == nil {
			if l == "" {
				continue
			}
			base, md5, ok := strings.Cut(l, " ")
			md5 = strings.TrimSpace(md5)
			if !ok || fanout.ValidName(base) != nil || !isMD5(md5) {
				return nil, fmt.Errorf("signatures line %d: %q: want \"<file> <md5>\"", line, l)
			}
			if _, dup := out[base]; dup {
				return nil, fmt.Errorf("signatures line %d: file %s signed twice", line, base)
			}
			cur = &Signed{Base: base, MD5: md5}
			sig.Reset()
			continue
		}
		sig.WriteString(l + "\n")
		if l == "." {
			cur.Signature = sig.String()
			out[cur.Base] = *cur
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read signatures: %w", err)
	}
	if cur != nil {
		return nil, fmt.Errorf("signatures: the signature of %s has no closing \".\" line", cur.Base)
	}
	return out, nil
}
