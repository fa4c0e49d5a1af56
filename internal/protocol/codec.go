package protocol

import (
	"bufio"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// The message types carry encoding/xml struct tags, and this file reads and
// writes them with those tags, in BOINC's dialect rather than encoding/xml's:
// reading goes through the lenient scan; writing leaves newlines and quotes
// unescaped (encoding/xml writes "&#xA;", which the client's parser does not
// decode, and keys and signatures are multi-line), writes flags as <x/>, and
// writes signatures and keys on lines of their own as the samples do.
//
// Supported tag forms: "name", "name,omitempty", "a>b" (a wrapper element),
// "name,attr", ",chardata", ",innerxml", "-". Supported field types: string,
// signed integers, float64, bool, structs, pointers to structs (*Empty is a
// flag), and slices of those.

// field is one struct field's mapping.
type field struct {
	index     int
	path      []string // element names, outermost first; empty for attr/chardata/innerxml
	attr      string
	chardata  bool
	innerxml  bool
	omitempty bool
	// flag is the index of the struct's bool field Has<Name>, which asks
	// for an empty element to be written; nil if there is none. Looked up
	// once per type: by name per element written, it was 3% of the
	// scheduler's CPU.
	flag []int
}

var fieldCache sync.Map // reflect.Type -> []field

func fieldsOf(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() || sf.Name == "XMLName" {
			continue
		}
		tag, ok := sf.Tag.Lookup("xml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !ok || name == "" && opts == "" {
			name = sf.Name
		}
		f := field{index: i}
		if h, ok := t.FieldByName("Has" + sf.Name); ok && h.Type.Kind() == reflect.Bool {
			f.flag = h.Index
		}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "attr":
				f.attr = name
			case "chardata":
				f.chardata = true
			case "innerxml":
				f.innerxml = true
			case "omitempty":
				f.omitempty = true
			}
		}
		if f.attr == "" && !f.chardata && !f.innerxml {
			f.path = strings.Split(name, ">")
		}
		fs = append(fs, f)
	}
	fieldCache.Store(t, fs)
	return fs
}

// decodeInto fills the struct v from the element n.
func decodeInto(n *node, v reflect.Value) {
	for _, f := range fieldsOf(v.Type()) {
		fv := v.Field(f.index)
		switch {
		case f.attr != "":
			if fv.Kind() == reflect.String {
				fv.SetString(n.attr(f.attr))
			}
		case f.chardata:
			setScalar(fv, n.text())
		case f.innerxml:
			// Raw content is kept only from an element closed by its own
			// tag: one closed by an ancestor's may hold an open tag of its
			// own name, which would swallow the close tag when written
			// back.
			if fv.Kind() == reflect.String && n.closed {
				fv.SetString(n.inner)
			}
		default:
			nodes := []*node{n}
			for _, name := range f.path {
				var next []*node
				for _, p := range nodes {
					for _, c := range p.children {
						if c.name == name {
							next = append(next, c)
						}
					}
				}
				nodes = next
			}
			if len(nodes) == 0 {
				continue
			}
			if fv.Kind() == reflect.Slice {
				s := reflect.MakeSlice(fv.Type(), len(nodes), len(nodes))
				for i, c := range nodes {
					decodeValue(c, s.Index(i))
				}
				fv.Set(s)
				continue
			}
			decodeValue(nodes[0], fv)
		}
	}
}

func decodeValue(n *node, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		decodeInto(n, v)
	case reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Struct {
			return
		}
		p := reflect.New(v.Type().Elem())
		decodeInto(n, p.Elem())
		v.Set(p)
	case reflect.Bool:
		// BOINC flags are "<x/>" or "<x>1</x>"; "<x>0</x>" is false.
		t := n.text()
		v.SetBool(t == "" || t != "0" && t != "false")
	default:
		setScalar(v, n.text())
	}
}

// setScalar parses s into v as leniently as BOINC's atoi/atof: an
// unusable number is 0. Non-finite floats are 0 too, so a request cannot
// push NaN or Inf into the scheduler's arithmetic.
func setScalar(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(parseInt(s, v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// OpenCL's bit fields and memory sizes (%llu in the client).
		if u, err := strconv.ParseUint(strings.TrimSpace(s), 10, v.Type().Bits()); err == nil {
			v.SetUint(u)
		} else if f := parseFloat(s); f > 0 && f < math.Ldexp(1, v.Type().Bits()) {
			v.SetUint(uint64(f))
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(parseFloat(s))
	case reflect.Bool:
		v.SetBool(s == "" || s != "0" && s != "false")
	}
}

func parseInt(s string, bits int) int64 {
	if i, err := strconv.ParseInt(s, 10, bits); err == nil {
		return i
	}
	f := parseFloat(s)
	lim := math.Ldexp(1, bits-1)
	if f >= lim || f < -lim {
		return 0
	}
	return int64(f)
}

func parseFloat(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// blockElements hold multi-line hex text (keys, signatures); they are
// written on lines of their own, as BOINC does.
var blockElements = map[string]bool{
	"code_sign_key":           true,
	"code_sign_key_signature": true,
	"file_signature":          true,
	"xml_signature":           true,
}

// encoder writes elements in BOINC's layout: top-level entities at the left
// margin, their contents indented by four spaces per level.
type encoder struct {
	w *bufio.Writer
}

func (e *encoder) indent(level int) {
	for range level {
		e.w.WriteString("    ")
	}
}

// fields writes the fields of struct v as child elements at level.
func (e *encoder) fields(v reflect.Value, level int) {
	for _, f := range fieldsOf(v.Type()) {
		if f.path == nil {
			continue
		}
		fv := v.Field(f.index)
		if len(f.path) > 1 {
			// An empty wrapper can carry meaning (an empty <other_results>
			// says "no tasks in progress"); a bool field Has<Field> asks
			// for it to be written.
			if f.omitempty && fv.IsZero() && !hasFlag(v, f) {
				continue
			}
			e.wrapped(f.path, fv, level)
			continue
		}
		// An empty element can carry meaning too (an empty <team_name>
		// clears the client's): Has<Field> asks for it.
		e.value(f.path[0], fv, f.omitempty && !hasFlag(v, f), level)
	}
}

// hasFlag reports whether struct v has a true bool field Has<f>.
func hasFlag(v reflect.Value, f field) bool {
	return f.flag != nil && v.FieldByIndex(f.flag).Bool()
}

// wrapped writes "a>b" fields: <a> around every b.
func (e *encoder) wrapped(path []string, v reflect.Value, level int) {
	e.indent(level)
	e.w.WriteString("<" + path[0] + ">\n")
	if len(path) > 2 {
		e.wrapped(path[1:], v, level+1)
	} else {
		e.value(path[1], v, false, level+1)
	}
	e.indent(level)
	e.w.WriteString("</" + path[0] + ">\n")
}

// value writes one field (all elements of a slice) as element name.
func (e *encoder) value(name string, v reflect.Value, omitempty bool, level int) {
	switch v.Kind() {
	case reflect.Slice:
		for i := range v.Len() {
			e.value(name, v.Index(i), false, level)
		}
		return
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		e.value(name, v.Elem(), false, level)
		return
	case reflect.Struct:
		if omitempty && v.IsZero() {
			return
		}
		e.element(name, v, level)
		return
	case reflect.Bool:
		if v.Bool() {
			e.indent(level)
			e.w.WriteString("<" + name + "/>\n")
		}
		return
	}
	if omitempty && v.IsZero() {
		return
	}
	text := scalarText(v)
	e.indent(level)
	e.w.WriteString("<" + name + ">")
	if blockElements[name] {
		e.w.WriteString("\n" + escapeText(strings.TrimSpace(text)) + "\n")
	} else {
		e.w.WriteString(escapeText(text))
	}
	e.w.WriteString("</" + name + ">\n")
}

// element writes a struct as element name.
func (e *encoder) element(name string, v reflect.Value, level int) {
	fs := fieldsOf(v.Type())
	e.indent(level)
	e.w.WriteString("<" + name)
	inline, children := false, false
	for _, f := range fs {
		fv := v.Field(f.index)
		switch {
		case f.attr != "":
			if f.omitempty && fv.IsZero() {
				continue
			}
			e.w.WriteString(" " + f.attr + `="` + escapeAttr(scalarText(fv)) + `"`)
		case f.chardata, f.innerxml:
			inline = true
		default:
			children = true
		}
	}
	if !inline && !children {
		e.w.WriteString("/>\n")
		return
	}
	e.w.WriteString(">")
	if inline {
		for _, f := range fs {
			fv := v.Field(f.index)
			switch {
			case f.chardata:
				e.w.WriteString(escapeText(scalarText(fv)))
			case f.innerxml:
				e.w.WriteString(fv.String())
			}
		}
	}
	if children {
		e.w.WriteString("\n")
		e.fields(v, level+1)
		e.indent(level)
	}
	e.w.WriteString("</" + name + ">\n")
}

func scalarText(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return formatFloat(v.Float())
	case reflect.Bool:
		if v.Bool() {
			return "1"
		}
		return "0"
	}
	return ""
}

// formatFloat writes a number the client's strtod reads back exactly,
// without an exponent where that stays short: times and byte counts are
// whole numbers and read best as such.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "0"
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case math.Abs(f) >= 1e-4 && math.Abs(f) < 1e21:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

var (
	textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
)

// escapeText escapes only what would change the document's structure. The
// client unescapes these five entities (and only these) in strings.
func escapeText(s string) string { return textEscaper.Replace(s) }

func escapeAttr(s string) string { return attrEscaper.Replace(s) }
