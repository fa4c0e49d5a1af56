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

// flag consumes <name/> if it is next and reports whether it was.
func (c *cursor) flag(name string) bool {
	if c.peek("<" + name + "/>") {
		c.lit("<" + name + "/>")
		return true
	}
	return false
}

// parseWorkunitFast reads a workunit document in FormatWorkunit's form;
// ok is false for any other form.
func parseWorkunitFast(doc string) (w Workunit, ok bool) {
	c := cursor{s: doc, ok: true}
	var infos []InputFile
	for c.peek("<file_info>") {
		c.lit("<file_info>")
		var f InputFile
		f.Name = c.text("name")
		for c.peek("<url>") {
			f.URLs = append(f.URLs, c.text("url"))
		}
		f.MD5 = c.text("md5_cksum")
		f.Nbytes = c.float("nbytes")
		if c.peek("<gzipped_nbytes>") {
			f.GzippedNbytes = c.float("gzipped_nbytes")
			// Written only when positive.
			c.ok = c.ok && f.GzippedNbytes > 0
		}
		f.Sticky = c.flag("sticky")
		f.NoDelete = c.flag("no_delete")
		c.lit("</file_info>")
		infos = append(infos, f)
	}
	c.lit("<workunit>")
	if c.peek("<command_line>") {
		w.CommandLine = c.text("command_line")
		// The XML reader trims it; a line written with spaces around it is
		// left to that reader.
		c.ok = c.ok && w.CommandLine != "" && w.CommandLine == strings.TrimSpace(w.CommandLine)
	}
	for i := 0; c.peek("<file_ref>"); i++ {
		c.lit("<file_ref>")
		name := c.text("file_name")
		if !c.ok || i >= len(infos) || infos[i].Name != name {
			return Workunit{}, false
		}
		infos[i].OpenName = c.text("open_name")
		infos[i].CopyFile = c.flag("copy_file")
		c.lit("</file_ref>")
		w.Inputs = append(w.Inputs, infos[i])
	}
	c.lit("</workunit>")
	return w, c.ok && c.s == "" && len(w.Inputs) == len(infos) && openNamesSet(w.Inputs)
}

// openNamesSet reports whether every input has an open name (the XML
// reader puts the file name in an empty one).
func openNamesSet(in []InputFile) bool {
	for _, f := range in {
		if f.OpenName == "" {
			return false
		}
	}
	return true
}

// parseResultFast reads a result document in FormatResult's form; ok is
// false for any other form.
func parseResultFast(doc string) (outs []OutputFile, ok bool) {
	c := cursor{s: doc, ok: true}
	var infos []OutputFile
	for c.peek("<file_info>") {
		c.lit("<file_info>")
		var f OutputFile
		f.Name = c.text("name")
		c.lit("<generated_locally/><upload_when_present/>")
		f.MaxNbytes = c.float("max_nbytes")
		c.lit("</file_info>")
		infos = append(infos, f)
	}
	c.lit("<result>")
	for i := 0; c.peek("<file_ref>"); i++ {
		c.lit("<file_ref>")
		name := c.text("file_name")
		if !c.ok || i >= len(infos) || infos[i].Name != name {
			return nil, false
		}
		infos[i].OpenName = c.text("open_name")
		if infos[i].OpenName == "" {
			return nil, false
		}
		infos[i].CopyFile = c.flag("copy_file")
		infos[i].Optional = c.flag("optional")
		infos[i].NoValidate = c.flag("no_validate")
		c.lit("</file_ref>")
		outs = append(outs, infos[i])
	}
	c.lit("</result>")
	return outs, c.ok && c.s == "" && len(outs) == len(infos)
}
