package jobxml

import (
	"math"
	"strconv"
	"strings"
)

// The scheduler parses a job's and an instance's document for every
// instance it sends, and the other daemons for every job they handle;
// encoding/xml spends most of that in reflection and token allocation. The
// documents are almost always in the exact form FormatWorkunit and
// FormatResult write, so that form is read here by plain string scanning,
// and anything else (another producer's spacing, attributes, escaped
// characters) goes to encoding/xml. FuzzFastParse checks that both agree
// wherever the fast reader answers.

// cursor reads a document in the canonical form.
type cursor struct {
	s  string
	ok bool
}

// lit consumes lit exactly.
func (c *cursor) lit(lit string) {
	if c.ok && strings.HasPrefix(c.s, lit) {
		c.s = c.s[len(lit):]
		return
	}
	c.ok = false
}

// peek reports whether the rest starts with lit.
func (c *cursor) peek(lit string) bool { return c.ok && strings.HasPrefix(c.s, lit) }

// text consumes <name>TEXT</name> and returns TEXT. Text with markup or an
// escape is left to encoding/xml.
func (c *cursor) text(name string) string {
	c.lit("<" + name + ">")
	if !c.ok {
		return ""
	}
	end := strings.IndexByte(c.s, '<')
	if end < 0 {
		c.ok = false
		return ""
	}
	t := c.s[:end]
	for i := 0; i < len(t); i++ {
		// Escapes, control characters (some illegal in XML, \r rewritten)
		// and anything beyond ASCII (to be checked as XML characters).
		if b := t[i]; b == '&' || b == '>' || (b < 0x20 && b != '\t' && b != '\n') || b >= 0x80 {
			c.ok = false
			return ""
		}
	}
	c.s = c.s[end:]
	c.lit("</" + name + ">")
	return t
}

// float consumes <name>NUMBER</name> as encoding/xml would read it.
func (c *cursor) float(name string) float64 {
	t := c.text(name)
	if !c.ok {
		return 0
	}
	f, err := strconv.ParseFloat(t, 64)
	// NaN and infinities are left to encoding/xml too: only their
	// comparison in FuzzFastParse would differ, but they are never written.
	if err != nil || t != strings.TrimSpace(t) || math.IsNaN(f) || math.IsInf(f, 0) {
		c.ok = false
	}
	return f
}

// parseWorkunitFast reads a workunit document in FormatWorkunit's form;
// ok is false for any other form.
func parseWorkunitFast(doc string) (d workunitDoc, ok bool) {
	c := cursor{s: doc, ok: true}
	c.lit("<workunit>")
	if c.peek("<command_line>") {
		d.CommandLine = c.text("command_line")
	}
	for c.peek("<file_info>") {
		c.lit("<file_info>")
		var f InputFile
		f.Name = c.text("name")
		f.OpenName = c.text("open_name")
		f.Nbytes = c.float("nbytes")
		f.MD5 = c.text("md5_cksum")
		c.lit("</file_info>")
		d.Inputs = append(d.Inputs, f)
	}
	c.lit("</workunit>")
	return d, c.ok && c.s == ""
}

// parseResultFast reads a result document in FormatResult's form; ok is
// false for any other form.
func parseResultFast(doc string) (outs []OutputFile, ok bool) {
	c := cursor{s: doc, ok: true}
	c.lit("<result>")
	for c.peek("<file_info>") {
		c.lit("<file_info>")
		var f OutputFile
		f.Name = c.text("name")
		f.OpenName = c.text("open_name")
		f.MaxNbytes = c.float("max_nbytes")
		c.lit("</file_info>")
		outs = append(outs, f)
	}
	c.lit("</result>")
	return outs, c.ok && c.s == ""
}
