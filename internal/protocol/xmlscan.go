package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Errors of the parsers. The scheduler answers each with a scheduler reply
// (message, request_delay) and logs it; the data server refuses the upload.
var (
	// ErrTooLarge: the input is longer, or holds more elements, than the
	// limit.
	ErrTooLarge = errors.New("message too large")
	// ErrTooDeep: elements are nested deeper than the limit.
	ErrTooDeep = errors.New("message nested too deeply")
	// ErrMalformed: the input is not the expected message, or is cut off.
	ErrMalformed = errors.New("malformed message")
)

// Limits bound what a parser accepts from the network.
type Limits struct {
	// MaxBytes is the largest input read, in bytes.
	MaxBytes int64
	// MaxDepth is the deepest element nesting accepted.
	MaxDepth int
	// MaxElements is the most elements accepted; it bounds memory, since an
	// element costs more to hold than the bytes that spell it. A scheduler
	// request's reports are counted one by one.
	MaxElements int
	// MaxReports is the most reports (<result>) kept from a scheduler
	// request; 0 is DefaultMaxReports.
	MaxReports int
	// MaxReportBytes bounds the bytes kept of a scheduler request's reports,
	// stderr included; 0 is DefaultMaxReportBytes. The report that reaches
	// it is the last kept.
	MaxReportBytes int64
	// MaxStderrBytes is the most kept of a report's stderr_out, its end; 0
	// is ClientStderrMax.
	MaxStderrBytes int
}

// DefaultLimits suit scheduler requests: a real request is under 10 KB plus
// up to ClientStderrMax per reported result, and nests 5 deep.
func DefaultLimits() Limits {
	return Limits{MaxBytes: DefaultMaxBodyBytes, MaxDepth: 32, MaxElements: 100_000, MaxReports: DefaultMaxReports,
		MaxReportBytes: DefaultMaxReportBytes, MaxStderrBytes: ClientStderrMax}
}

// node is one element of a document read by scan. Only elements are kept:
// the value of a leaf is its raw content, which is what BOINC's own parser
// uses, so unescaped '<' and '&' in names survive.
type node struct {
	name     string
	attrs    []attr
	children []*node
	// inner is the raw text between the open and close tags.
	inner string
	// closed is false for an element cut off by the end of the input.
	closed bool
}

type attr struct{ name, value string }

// child returns the first child element called name, or nil.
func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// find returns the first element called name below n, depth first,
// without entering elements for which skip is true.
func (n *node) find(name string, skip func(*node) bool) *node {
	for _, c := range n.children {
		if skip != nil && skip(c) {
			continue
		}
		if c.name == name {
			return c
		}
		if f := c.find(name, skip); f != nil {
			return f
		}
	}
	return nil
}

func (n *node) attr(name string) string {
	for _, a := range n.attrs {
		if a.name == name {
			return a.value
		}
	}
	return ""
}

// text is the element's content as a string value: CDATA unwrapped,
// character references decoded, surrounding white space trimmed (BOINC's
// parse_str does the same).
func (n *node) text() string { return decodeText(n.inner) }

// scan reads a document leniently, the way BOINC's tag scanner does rather
// than as an XML validator would: a '<' that does not start a well-formed
// tag is text, an unknown entity is text, a close tag closes the nearest
// open element of that name (and everything opened inside it), a close tag
// with no open element is ignored, and the end of the input closes
// everything. It returns a synthetic root whose children are the top-level
// elements. Only nesting depth and element count can make it fail.
func scan(src string, lim Limits) (*node, error) {
	root := &node{closed: true}
	stack := []*node{root}
	starts := []int{0} // content start offset of each open element
	count := 0
	pos := 0
	for {
		i := strings.IndexByte(src[pos:], '<')
		if i < 0 {
			break
		}
		i += pos
		rest := src[i:]
		switch {
		case strings.HasPrefix(rest, "<!--"):
			pos = skipPast(src, i+4, "-->")
			continue
		case strings.HasPrefix(rest, "<![CDATA["):
			pos = skipPast(src, i+9, "]]>")
			continue
		case strings.HasPrefix(rest, "<?"):
			pos = skipPast(src, i+2, "?>")
			continue
		case strings.HasPrefix(rest, "<!"):
			pos = skipPast(src, i+2, ">")
			continue
		case strings.HasPrefix(rest, "</"):
			name, end, ok := closeTag(src, i+2)
			if !ok {
				pos = i + 1
				continue
			}
			pos = end
			for k := len(stack) - 1; k > 0; k-- {
				if stack[k].name != name {
					continue
				}
				for j := len(stack) - 1; j >= k; j-- {
					stack[j].inner = src[starts[j]:i]
				}
				stack[k].closed = true
				stack, starts = stack[:k], starts[:k]
				break
			}
			continue
		}
		n, end, empty, ok := openTag(src, i+1)
		if !ok {
			pos = i + 1
			continue
		}
		pos = end
		count++
		if count > lim.MaxElements {
			return nil, fmt.Errorf("%w: more than %d elements", ErrTooLarge, lim.MaxElements)
		}
		parent := stack[len(stack)-1]
		parent.children = append(parent.children, n)
		if empty {
			n.closed = true
			continue
		}
		if len(stack) > lim.MaxDepth {
			return nil, fmt.Errorf("%w: more than %d levels", ErrTooDeep, lim.MaxDepth)
		}
		stack = append(stack, n)
		starts = append(starts, end)
	}
	for j := len(stack) - 1; j > 0; j-- {
		stack[j].inner = src[starts[j]:]
	}
	return root, nil
}

// skipPast returns the offset after the first sep at or after from, or the
// end of src.
func skipPast(src string, from int, sep string) int {
	if j := strings.Index(src[from:], sep); j >= 0 {
		return from + j + len(sep)
	}
	return len(src)
}

// closeTag reads "name>" (white space allowed before '>') at i.
func closeTag(src string, i int) (name string, end int, ok bool) {
	j := i
	for j < len(src) && isNameByte(src[j]) {
		j++
	}
	if j == i {
		return "", 0, false
	}
	name = src[i:j]
	for j < len(src) && isSpace(src[j]) {
		j++
	}
	if j >= len(src) || src[j] != '>' {
		return "", 0, false
	}
	return name, j + 1, true
}

// openTag reads "name attr="v" ...>" or ".../>" at i (just after '<').
func openTag(src string, i int) (n *node, end int, empty, ok bool) {
	j := i
	if j >= len(src) || !isNameStart(src[j]) {
		return nil, 0, false, false
	}
	for j < len(src) && isNameByte(src[j]) {
		j++
	}
	n = &node{name: src[i:j]}
	for {
		k := j
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) {
			return nil, 0, false, false
		}
		switch {
		case src[j] == '>':
			return n, j + 1, false, true
		case strings.HasPrefix(src[j:], "/>"):
			return n, j + 2, true, true
		case j == k || !isNameStart(src[j]):
			// An attribute must follow white space: "<a<b" is text.
			return nil, 0, false, false
		}
		a := j
		for j < len(src) && isNameByte(src[j]) {
			j++
		}
		name := src[a:j]
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) || src[j] != '=' {
			n.attrs = append(n.attrs, attr{name: name})
			continue
		}
		j++
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) {
			return nil, 0, false, false
		}
		var value string
		if q := src[j]; q == '"' || q == '\'' {
			e := strings.IndexByte(src[j+1:], q)
			if e < 0 {
				return nil, 0, false, false
			}
			value = src[j+1 : j+1+e]
			j += e + 2
		} else {
			v := j
			for j < len(src) && !isSpace(src[j]) && src[j] != '>' && src[j] != '<' {
				j++
			}
			if j == v {
				return nil, 0, false, false
			}
			value = src[v:j]
			if strings.HasSuffix(value, "/") && j < len(src) && src[j] == '>' {
				value, j = value[:len(value)-1], j-1
			}
		}
		n.attrs = append(n.attrs, attr{name: name, value: unescape(value)})
	}
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

func isNameByte(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9' || c == '-' || c == '.'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// decodeText turns raw element content into its string value: the insides
// of CDATA sections are kept as they are, the rest has character
// references decoded, and the result is trimmed.
func decodeText(raw string) string {
	if !strings.Contains(raw, "<![CDATA[") {
		return strings.TrimSpace(unescape(raw))
	}
	var b strings.Builder
	for {
		i := strings.Index(raw, "<![CDATA[")
		if i < 0 {
			b.WriteString(unescape(raw))
			break
		}
		b.WriteString(unescape(raw[:i]))
		raw = raw[i+9:]
		j := strings.Index(raw, "]]>")
		if j < 0 {
			b.WriteString(raw)
			break
		}
		b.WriteString(raw[:j])
		raw = raw[j+3:]
	}
	return strings.TrimSpace(b.String())
}

var entities = map[string]string{"lt": "<", "gt": ">", "amp": "&", "quot": `"`, "apos": "'"}

// unescape decodes the five XML entities and numeric character
// references; anything else after '&' is left as it is, since the client
// does not escape what it sends.
func unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i:]
		// References are short; looking further would make a run of bare
		// '&' quadratic.
		semi := strings.IndexByte(s[:min(len(s), 12)], ';')
		if semi < 0 {
			b.WriteByte('&')
			s = s[1:]
			continue
		}
		ref := s[1:semi]
		if v, ok := entities[ref]; ok {
			b.WriteString(v)
			s = s[semi+1:]
			continue
		}
		if r, ok := charRef(ref); ok {
			b.WriteRune(r)
			s = s[semi+1:]
			continue
		}
		b.WriteByte('&')
		s = s[1:]
	}
}

// charRef decodes "#65" or "#x41".
func charRef(ref string) (rune, bool) {
	if !strings.HasPrefix(ref, "#") || len(ref) < 2 {
		return 0, false
	}
	base, digits := 10, ref[1:]
	if digits[0] == 'x' || digits[0] == 'X' {
		base, digits = 16, digits[1:]
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil || v == 0 || !utf8.ValidRune(rune(v)) {
		return 0, false
	}
	return rune(v), true
}
