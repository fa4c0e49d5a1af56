package dbpurge

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"
)

// appendRecord appends row (a store row struct) as one archive record named
// table, with one child element per db-tagged field in declaration order.
func appendRecord(buf *bytes.Buffer, table string, row any) {
	v := reflect.ValueOf(row)
	plan := planOf(v.Type())
	buf.WriteString("<" + table + ">\n")
	var num [32]byte
	for _, c := range plan {
		buf.WriteString(c.open)
		f := v.Field(c.index)
		switch c.kind {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			buf.Write(strconv.AppendInt(num[:0], f.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			buf.Write(strconv.AppendUint(num[:0], f.Uint(), 10))
		case reflect.Float32, reflect.Float64:
			buf.Write(strconv.AppendFloat(num[:0], f.Float(), 'g', -1, 64))
		case reflect.Bool:
			if f.Bool() {
				buf.WriteByte('1')
			} else {
				buf.WriteByte('0')
			}
		case reflect.String:
			escapeText(buf, f.String())
		}
		buf.WriteString(c.close)
	}
	buf.WriteString("</" + table + ">\n")
}

// column is how one field of a row struct is archived.
type column struct {
	index       int
	kind        reflect.Kind
	open, close string // "    <col>" and "</col>\n"
}

// plans caches each row type's columns: working them out from the struct
// tags for every row cost more than writing the row.
var plans sync.Map // reflect.Type → []column

func planOf(t reflect.Type) []column {
	if p, ok := plans.Load(t); ok {
		return p.([]column)
	}
	var cols []column
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("db")
		if name == "" || name == "-" {
			continue
		}
		k := t.Field(i).Type.Kind()
		switch k {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64, reflect.Bool, reflect.String:
		default:
			panic(fmt.Sprintf("dbpurge: column %s has unsupported kind %s", name, k))
		}
		cols = append(cols, column{index: i, kind: k, open: "    <" + name + ">", close: "</" + name + ">\n"})
	}
	plans.Store(t, cols)
	return cols
}

// escapeText writes s as XML character data, byte for byte as
// xml.EscapeText does (FuzzEscapeText holds it to that), without its
// per-character writes: runs of plain ASCII are copied at once.
func escapeText(buf *bytes.Buffer, s string) {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '<' && c != '>' && c != '&' && c != '\'' && c != '"' {
			i++
			continue
		}
		var esc string
		width := 1
		switch c {
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "&#x9;"
		case '\n':
			esc = "&#xA;"
		case '\r':
			esc = "&#xD;"
		default:
			var r rune
			r, width = utf8.DecodeRuneInString(s[i:])
			if isXMLChar(r) && (r != utf8.RuneError || width != 1) {
				i += width
				continue
			}
			esc = "\uFFFD"
		}
		buf.WriteString(s[last:i])
		buf.WriteString(esc)
		i += width
		last = i
	}
	buf.WriteString(s[last:])
}

// isXMLChar reports whether r may appear in XML text (the Char production
// of XML 1.0), as encoding/xml decides it.
func isXMLChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}

// Record is one archived row: its table and its columns' text values.
type Record struct {
	Table   string
	Columns map[string]string
}

// ReadArchive reads every record of an archive file's content (gzip, one or
// more members). A torn last member (a crash while writing) yields the
// records before it and an error wrapping io.ErrUnexpectedEOF.
func ReadArchive(r io.Reader) ([]Record, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read archive: %w", err)
	}
	defer zr.Close()
	dec := xml.NewDecoder(zr)
	var out []Record
	var cur *Record
	var col string
	var text bytes.Buffer
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if cur != nil {
				return out, fmt.Errorf("read archive: record %s not closed: %w", cur.Table, io.ErrUnexpectedEOF)
			}
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read archive: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch {
			case cur == nil:
				cur = &Record{Table: t.Name.Local, Columns: map[string]string{}}
			case col == "":
				col = t.Name.Local
				text.Reset()
			default:
				return out, fmt.Errorf("read archive: element %s inside column %s", t.Name.Local, col)
			}
		case xml.CharData:
			if col != "" {
				text.Write(t)
			}
		case xml.EndElement:
			switch {
			case col != "":
				cur.Columns[col] = text.String()
				col = ""
			case cur != nil:
				out = append(out, *cur)
				cur = nil
			}
		}
	}
}
