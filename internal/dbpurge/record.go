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
)

// appendRecord appends row (a store row struct) as one archive record named
// table, with one child element per db-tagged field in declaration order.
func appendRecord(buf *bytes.Buffer, table string, row any) {
	v := reflect.ValueOf(row)
	t := v.Type()
	buf.WriteString("<" + table + ">\n")
	for i := 0; i < t.NumField(); i++ {
		col := t.Field(i).Tag.Get("db")
		if col == "" || col == "-" {
			continue
		}
		buf.WriteString("    <" + col + ">")
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			buf.WriteString(strconv.FormatInt(f.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			buf.WriteString(strconv.FormatUint(f.Uint(), 10))
		case reflect.Float32, reflect.Float64:
			buf.WriteString(strconv.FormatFloat(f.Float(), 'g', -1, 64))
		case reflect.Bool:
			if f.Bool() {
				buf.WriteString("1")
			} else {
				buf.WriteString("0")
			}
		case reflect.String:
			_ = xml.EscapeText(buf, []byte(f.String())) // a bytes.Buffer does not fail
		default:
			panic(fmt.Sprintf("dbpurge: column %s has unsupported kind %s", col, f.Kind()))
		}
		buf.WriteString("</" + col + ">\n")
	}
	buf.WriteString("</" + table + ">\n")
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
