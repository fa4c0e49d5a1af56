package boincconfig

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Option is one element of config.xml's <config>, in file order.
type Option struct {
	Name  string
	Value string // trimmed text; "" for an empty element such as <x/>
}

// Entry is one <daemon> or <task> of config.xml.
type Entry struct {
	Cmd      string
	Host     string // "" when the entry runs on the project's main host
	Disabled bool
	Period   string // tasks only: "24 hours", "1 days", …
}

// File is a parsed config.xml.
type File struct {
	Options []Option
	Daemons []Entry
	Tasks   []Entry
}

// Lookup returns the last value of option name (BOINC's parser keeps the
// last one) and whether it is there.
func (f *File) Lookup(name string) (string, bool) {
	v, ok := "", false
	for _, o := range f.Options {
		if o.Name == name {
			v, ok = o.Value, true
		}
	}
	return v, ok
}

// ParseConfig reads config.xml. <boinc> and <config> are required, as
// they are for BOINC's own programs; an option holding elements rather
// than text is an error naming it.
func ParseConfig(body []byte) (*File, error) {
	d := newDecoder(body)
	if err := expectRoot(d, "boinc"); err != nil {
		return nil, err
	}
	f := &File{}
	sawConfig := false
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("config.xml: %w", syntaxErr(err))
		}
		switch t := tok.(type) {
		case xml.EndElement: // </boinc>
			if !sawConfig {
				return nil, errors.New("config.xml: no <config> element in <boinc>")
			}
			return f, nil
		case xml.StartElement:
			switch t.Name.Local {
			case "config":
				sawConfig = true
				if f.Options, err = parseOptions(d); err != nil {
					return nil, err
				}
			case "daemons", "tasks":
				list, err := parseEntries(d, t.Name.Local)
				if err != nil {
					return nil, err
				}
				if t.Name.Local == "daemons" {
					f.Daemons = append(f.Daemons, list...)
				} else {
					f.Tasks = append(f.Tasks, list...)
				}
			default:
				if err := d.Skip(); err != nil {
					return nil, fmt.Errorf("config.xml: %w", syntaxErr(err))
				}
			}
		}
	}
}

func newDecoder(body []byte) *xml.Decoder {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	// make_project writes no encoding; files that declare ISO-8859-1 are
	// ASCII in practice.
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	return d
}

// expectRoot reads up to the document's root element and checks its name.
func expectRoot(d *xml.Decoder, want string) error {
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return fmt.Errorf("config.xml: no <%s> element", want)
		}
		if err != nil {
			return fmt.Errorf("config.xml: %w", syntaxErr(err))
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != want {
				return fmt.Errorf("config.xml: root element <%s>, want <%s>", se.Name.Local, want)
			}
			return nil
		}
	}
}

// syntaxErr turns an unexpected end of input into a message that says so.
func syntaxErr(err error) error {
	if err == io.EOF {
		return errors.New("unexpected end of file")
	}
	return err
}

// parseOptions reads <config>'s children up to </config>.
func parseOptions(d *xml.Decoder) ([]Option, error) {
	var out []Option
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("config.xml: <config>: %w", syntaxErr(err))
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return out, nil
		case xml.StartElement:
			v, err := leafText(d, t.Name.Local)
			if err != nil {
				return nil, err
			}
			out = append(out, Option{Name: t.Name.Local, Value: v})
		}
	}
}

// leafText reads the text of an element that must hold no elements.
func leafText(d *xml.Decoder, name string) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", fmt.Errorf("config.xml: <%s>: %w", name, syntaxErr(err))
		}
		switch t := tok.(type) {
		case xml.CharData:
			b.Write(t)
		case xml.StartElement:
			return "", fmt.Errorf("config.xml: <%s> holds an element <%s>; want text", name, t.Name.Local)
		case xml.EndElement:
			return strings.TrimSpace(b.String()), nil
		}
	}
}

// parseEntries reads <daemons> or <tasks> up to its end tag.
func parseEntries(d *xml.Decoder, list string) ([]Entry, error) {
	var out []Entry
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("config.xml: <%s>: %w", list, syntaxErr(err))
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return out, nil
		case xml.StartElement:
			opts, err := parseOptions(d)
			if err != nil {
				return nil, fmt.Errorf("<%s>: %w", list, err)
			}
			var e Entry
			for _, o := range opts {
				switch o.Name {
				case "cmd":
					e.Cmd = o.Value
				case "host":
					e.Host = o.Value
				case "disabled":
					e.Disabled = boolValue(o.Value)
				case "period":
					e.Period = o.Value
				}
			}
			if e.Cmd == "" {
				return nil, fmt.Errorf("config.xml: <%s> entry %d (<%s>) has no <cmd>", list, len(out)+1, t.Name.Local)
			}
			out = append(out, e)
		}
	}
}

// boolValue reads a flag as BOINC does: an empty element is true, "0" is
// false, any other number true.
func boolValue(v string) bool {
	v = strings.TrimSpace(v)
	return v != "0" && v != "false"
}

// splitCommand splits a daemon's <cmd> into words the way BOINC's start
// script does (POSIX shell quoting: '…', "…", backslash). An unbalanced
// quote is an error.
func splitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("command %q: unbalanced '", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("command %q: unbalanced \"", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
