package statsexport

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

// This file reads a dump the way a statistics site does, and more
// strictly: an XML declaration, the wrapper element, then records of one
// name whose children are all documented elements of BOINC's db_dump, each
// at most once, holding text only. Text comes back as the sites decode it:
// BOINC escapes each byte above 127 on its own, so the characters an XML
// parser returns are bytes, which must make valid UTF-8.

// record is one <user>, <team> or <host>: its elements' decoded text by
// name, and their names in file order.
type record struct {
	text  map[string]string
	order []string
}

// The elements BOINC's db_dump writes in each record (the default spec).
var (
	userElems = []string{"id", "name", "create_time", "total_credit", "expavg_credit", "expavg_time", "cpid",
		"country", "url", "teamid", "has_profile"}
	teamElems = []string{"id", "type", "name", "userid", "total_credit", "expavg_credit", "expavg_time",
		"founder_name", "create_time", "url", "name_html", "description", "country"}
	hostElems = []string{"id", "userid", "total_credit", "expavg_credit", "expavg_time", "p_vendor", "p_model",
		"os_name", "os_version", "misc", "create_time", "rpc_time", "timezone", "ncpus", "p_fpops", "p_iops",
		"p_membw", "m_nbytes", "m_cache", "m_swap", "d_total", "d_free", "n_bwup", "n_bwdown", "avg_turnaround",
		"credit_per_cpu_sec", "host_cpid"}
	tablesElems = []string{"update_time", "nusers_total", "nteams_total", "nhosts_total", "total_credit",
		"applications", "badges"}
)

// gunzip returns the decompressed content of a gz file.
func gunzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return io.ReadAll(z)
}

// parseDump parses doc as a file of records named item inside root, each
// child one of allowed.
func parseDump(doc []byte, root, item string, allowed []string) ([]record, error) {
	if !bytes.HasPrefix(doc, []byte(`<?xml version="1.0" encoding="utf-8"?>`+"\n")) {
		return nil, errors.New("no XML declaration first")
	}
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var out []record
	depth := 0
	var cur *record
	var name string
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			switch depth {
			case 1:
				if tok.Name.Local != root {
					return nil, fmt.Errorf("root element <%s>, want <%s>", tok.Name.Local, root)
				}
			case 2:
				if tok.Name.Local != item {
					return nil, fmt.Errorf("record <%s>, want <%s>", tok.Name.Local, item)
				}
				cur = &record{text: map[string]string{}}
			case 3:
				name = tok.Name.Local
				if !slices.Contains(allowed, name) {
					return nil, fmt.Errorf("<%s> in <%s>: not an element BOINC's db_dump writes", name, item)
				}
				if _, dup := cur.text[name]; dup {
					return nil, fmt.Errorf("<%s> twice in one <%s>", name, item)
				}
				text.Reset()
			default:
				return nil, fmt.Errorf("<%s> nested in <%s>", tok.Name.Local, name)
			}
		case xml.EndElement:
			if depth == 3 {
				s, err := siteText(text.String())
				if err != nil {
					return nil, fmt.Errorf("<%s>: %w", name, err)
				}
				cur.text[name] = s
				cur.order = append(cur.order, name)
			}
			if depth == 2 {
				out = append(out, *cur)
			}
			depth--
		case xml.CharData:
			if depth == 3 {
				text.Write(tok)
			} else if len(bytes.TrimSpace(tok)) > 0 {
				return nil, fmt.Errorf("text %q outside an element", tok)
			}
		case xml.ProcInst, xml.Comment:
		default:
			return nil, fmt.Errorf("unexpected %T", tok)
		}
	}
	if depth != 0 {
		return nil, errors.New("unclosed elements")
	}
	return out, nil
}

// siteText undoes BOINC's byte-wise escaping: every character must be a
// byte, and the bytes UTF-8.
func siteText(s string) (string, error) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 255 {
			return "", fmt.Errorf("character %U: BOINC writes bytes above 127 as references, one per byte", r)
		}
		b = append(b, byte(r))
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("bytes %q are not UTF-8", b)
	}
	return string(b), nil
}
