package filedeleter

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
)

// inputNames returns the names of the input files a workunit.xml_doc lists.
func inputNames(doc string) ([]string, error) {
	if names, ok := scanNames(doc, "workunit"); ok {
		return names, nil
	}
	w, err := jobxml.ParseWorkunit(doc)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(w.Inputs))
	for i, in := range w.Inputs {
		names[i] = in.Name
	}
	return names, nil
}

// outputNames returns the names of the output files a result.xml_doc_in
// lists.
func outputNames(doc string) ([]string, error) {
	if names, ok := scanNames(doc, "result"); ok {
		return names, nil
	}
	outs, err := jobxml.ParseResult(doc)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(outs))
	for i, out := range outs {
		names[i] = out.Name
	}
	return names, nil
}

// scanNames reads the file names of doc (the text of each root/file_info/name
// element) without encoding/xml, whose decoding cost the file deleter more
// CPU than deleting the files. It handles only the plain subset jobxml
// writes: elements without attributes, text without references, comments,
// CDATA or declarations, one name per file_info, every name valid. On
// anything else it reports false and the caller parses doc with jobxml,
// which gives the same names or the error. FuzzScanNames holds the two to
// agreement.
func scanNames(doc, root string) ([]string, bool) {
	if strings.TrimSpace(doc) == "" {
		return nil, true
	}
	var names []string
	var path [3]string // the open elements, root/file_info/name at most
	depth := 0         // how many are open
	named := false     // the open file_info has had its name
	i := 0
	for i < len(doc) {
		lt := strings.IndexByte(doc[i:], '<')
		if lt < 0 {
			lt = len(doc) - i
		}
		text := doc[i : i+lt]
		if !plainText(text) || depth == 0 && strings.TrimSpace(text) != "" {
			return nil, false
		}
		if depth == 3 && path[1] == "file_info" && path[2] == sizeField[root] && text != "" {
			// jobxml decodes it as a number and fails on anything else.
			if _, err := strconv.ParseFloat(strings.TrimSpace(text), 64); err != nil {
				return nil, false
			}
		}
		if depth == 3 && path[1] == "file_info" && path[2] == "name" {
			if named || fanout.ValidName(text) != nil || !strings.HasPrefix(doc[i+lt:], "</name>") {
				return nil, false
			}
			names = append(names, text)
			named = true
		}
		i += lt
		if i == len(doc) {
			break
		}
		gt := strings.IndexByte(doc[i:], '>')
		if gt < 0 {
			return nil, false
		}
		tag := doc[i+1 : i+gt]
		i += gt + 1
		if closing := strings.HasPrefix(tag, "/"); closing {
			tag = tag[1:]
			if depth == 0 || path[depth-1] != tag {
				return nil, false
			}
			if depth == 2 && path[1] == "file_info" && !named {
				return nil, false // jobxml reports a file_info without a name
			}
			depth--
			if depth == 0 {
				if strings.TrimSpace(doc[i:]) != "" {
					return nil, false
				}
				return names, true
			}
			continue
		}
		if !plainTag(tag) || depth == 0 && tag != root || depth == len(path) {
			// Deeper than root/x/y: an element inside one jobxml reads as
			// text is not worth following.
			return nil, false
		}
		path[depth] = tag
		depth++
		if depth == 2 && tag == "file_info" {
			named = false
		}
	}
	return nil, false // the root element is not closed
}

// sizeField is the numeric child of file_info that jobxml decodes, by root.
var sizeField = map[string]string{"workunit": "nbytes", "result": "max_nbytes"}

// plainTag reports whether tag is an element name with no attributes,
// namespace prefix or anything else the scanner leaves to encoding/xml.
func plainTag(tag string) bool {
	if tag == "" {
		return false
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// plainText reports whether s is character data the scanner may take as it
// is: no references (which encoding/xml would expand), no "]]>" (which it
// rejects outside CDATA), only characters
// XML allows, in valid UTF-8 (which encoding/xml would reject otherwise).
func plainText(s string) bool {
	if strings.Contains(s, "]]>") {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '&':
			return false
		case c >= 0x20 && c < utf8.RuneSelf, c == '\t', c == '\n', c == '\r':
			i++
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 || !(r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
				return false
			}
			i += n
		}
	}
	return true
}
