// Package appversion reads and writes app_version.xml_doc: the files of one
// build of an app, each with the code signature the BOINC client demands
// before it runs anything (PROTOCOL.md §5), and the version's command-line
// arguments (BOINC's <cmdline>). taskctl writes the document when
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
	"unicode/utf8"

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

// Version is what app_version.xml_doc holds: the version's files and the
// command-line arguments of the version, which the client sends the
// application after the job's own (client/app_start.cpp: "<program> <job's
// command line> <version's cmdline>").
type Version struct {
	// Cmdline is BOINC's <cmdline> of an <app_version>.
	Cmdline string
	// Files are the version's files; none for a version only the
	// simulated client can run.
	Files []File
}

// MaxCmdline is the longest cmdline the client keeps: it reads it into a
// 256-byte buffer (client/client_types.h, APP_VERSION::cmdline).
const MaxCmdline = 255

type doc struct {
	XMLName xml.Name `xml:"app_version_files"`
	Cmdline string   `xml:"cmdline,omitempty"`
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

// Format writes app_version.xml_doc for v, whose files, if any, must be
// valid (see Check). A version with neither files nor cmdline is the empty
// document.
func Format(v Version) (string, error) {
	if err := v.check(); err != nil {
		return "", err
	}
	if len(v.Files) == 0 && v.Cmdline == "" {
		return "", nil
	}
	b, err := xml.Marshal(doc{Cmdline: v.Cmdline, Files: v.Files})
	if err != nil {
		return "", fmt.Errorf("format app version files: %w", err)
	}
	return string(b), nil
}

// Parse reads app_version.xml_doc. An empty document is a version with no
// files; any other must be valid.
func Parse(text string) (Version, error) {
	if strings.TrimSpace(text) == "" {
		return Version{}, nil
	}
	var d doc
	if err := xml.Unmarshal([]byte(text), &d); err != nil {
		return Version{}, fmt.Errorf("parse app version files: %w", err)
	}
	v := Version{Cmdline: d.Cmdline, Files: d.Files}
	if err := v.check(); err != nil {
		return Version{}, err
	}
	return v, nil
}

// check reports whether v can be sent: its files, if any, valid, and a
// cmdline the client keeps whole.
func (v Version) check() error {
	if err := CheckCmdline(v.Cmdline); err != nil {
		return err
	}
	if len(v.Files) == 0 {
		return nil
	}
	return Check(v.Files)
}

// CheckCmdline reports whether cmdline can be a version's: at most
// MaxCmdline bytes (the client would cut it), one line of printable text
// (the client trims its ends and a line break would end the arguments).
func CheckCmdline(cmdline string) error {
	if len(cmdline) > MaxCmdline {
		return fmt.Errorf("%w: cmdline is %d bytes, want at most %d (the client keeps no more)", ErrInvalid, len(cmdline), MaxCmdline)
	}
	if cmdline != strings.TrimSpace(cmdline) {
		return fmt.Errorf("%w: cmdline %q starts or ends with white space, which the client drops", ErrInvalid, cmdline)
	}
	for _, r := range cmdline {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return fmt.Errorf("%w: cmdline %q has a control character or invalid UTF-8, want one line of text", ErrInvalid, cmdline)
		}
	}
	return nil
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
