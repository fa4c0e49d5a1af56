package projectprefs

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// Prefs are the project preferences that decide what a host is sent.
type Prefs struct {
	// Apps are the ids of the apps the volunteer selected; none means every
	// app.
	Apps []int64
	// AllowNonSelected sends other apps when the selected ones have no work
	// for the host (<allow_non_preferred_apps>).
	AllowNonSelected bool
	// AllowBeta lets beta apps and beta versions be sent
	// (<allow_beta_work>).
	AllowBeta bool
	// NoResource are the resources (protocol.ResourceCPU, …, or an "other"
	// coprocessor's type) the volunteer does not want used.
	NoResource []string
	// NoGPUs refuses every resource but the CPU (<no_gpus>, which BOINC
	// still honours).
	NoGPUs bool
	// MaxJobs, if positive, bounds the tasks a host holds (<max_jobs>).
	MaxJobs int
	// MaxCPUs, if positive, bounds the CPUs counted for a host
	// (<max_cpus>), so limits scaled by CPUs shrink with it.
	MaxCPUs int

	// top and specific are the elements this package does not manage, at
	// the top level and inside <project_specific>, kept for Format.
	top, specific []element
}

// element is one element kept as written.
type element struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Inner   []byte     `xml:",innerxml"`
}

// resourceElements are the per-resource opt-outs, by element name.
var resourceElements = []struct{ name, resource string }{
	{"no_cpu", protocol.ResourceCPU},
	{"no_cuda", protocol.ResourceNVIDIA},
	{"no_ati", protocol.ResourceAMD},
	{"no_intel_gpu", protocol.ResourceIntel},
	{"no_apple_gpu", protocol.ResourceApple},
}

// managed are the elements Parse reads and Format writes.
var managed = map[string]bool{"app_id": true, "apps_selected": true, "allow_non_preferred_apps": true, "allow_beta_work": true,
	"no_gpus": true, "no_rsc": true, "max_jobs": true, "max_cpus": true,
	"no_cpu": true, "no_cuda": true, "no_ati": true, "no_intel_gpu": true, "no_apple_gpu": true}

// ErrSyntax means a preferences document is not well-formed XML.
var ErrSyntax = errors.New("project preferences: not well-formed")

// Parse reads a <project_preferences> document for a host in venue ("" for
// none). An empty document is no preferences: every app, no beta, every
// resource. A section <venue name="V"> is used instead of the rest when V
// is the host's venue. An error wraps ErrSyntax; the scheduler then
// applies no preferences, as BOINC's lenient parser would mostly do.
func Parse(doc, venue string) (Prefs, error) {
	var p Prefs
	doc = strings.TrimSpace(doc)
	if doc == "" {
		return p, nil
	}
	var root struct {
		Children []element `xml:",any"`
	}
	if err := xml.Unmarshal([]byte(doc), &root); err != nil {
		return Prefs{}, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	src := root.Children
	if venue != "" {
		for _, e := range root.Children {
			if e.XMLName.Local == "venue" && attr(e, "name") == venue {
				var v struct {
					Children []element `xml:",any"`
				}
				if err := xml.Unmarshal(wrap(e.Inner), &v); err != nil {
					return Prefs{}, fmt.Errorf("%w: venue %q: %v", ErrSyntax, venue, err)
				}
				src = v.Children
				break
			}
		}
	}
	if err := p.read(src, 0); err != nil {
		return Prefs{}, err
	}
	// What Format keeps is always the default venue's document.
	for _, e := range root.Children {
		switch {
		case e.XMLName.Local == "project_specific":
			var s struct {
				Children []element `xml:",any"`
			}
			if err := xml.Unmarshal(wrap(e.Inner), &s); err != nil {
				return Prefs{}, fmt.Errorf("%w: project_specific: %v", ErrSyntax, err)
			}
			for _, c := range s.Children {
				if !managed[c.XMLName.Local] {
					p.specific = append(p.specific, c)
				}
			}
		case !managed[e.XMLName.Local]:
			p.top = append(p.top, e)
		}
	}
	return p, nil
}

// read takes the managed elements from es and, as BOINC finds them
// anywhere, from the elements inside them (but not from other venues).
func (p *Prefs) read(es []element, depth int) error {
	for _, e := range es {
		name := e.XMLName.Local
		text := strings.TrimSpace(string(e.Inner))
		switch name {
		case "app_id":
			if id, err := strconv.ParseInt(text, 10, 64); err == nil && id > 0 && !slices.Contains(p.Apps, id) {
				p.Apps = append(p.Apps, id)
			}
			continue
		case "allow_non_preferred_apps":
			p.AllowNonSelected = boolValue(text)
			continue
		case "allow_beta_work":
			p.AllowBeta = boolValue(text)
			continue
		case "no_gpus":
			p.NoGPUs = boolValue(text)
			continue
		case "no_rsc":
			if text != "" {
				p.setNo(text, true)
			}
			continue
		case "max_jobs":
			p.MaxJobs = max(intValue(text), 0)
			continue
		case "max_cpus":
			p.MaxCPUs = max(intValue(text), 0)
			continue
		case "venue":
			continue
		}
		if r, ok := resourceOf(name); ok {
			p.setNo(r, boolValue(text))
			continue
		}
		if depth < 4 && bytes.Contains(e.Inner, []byte("<")) {
			var in struct {
				Children []element `xml:",any"`
			}
			if xml.Unmarshal(wrap(e.Inner), &in) == nil {
				if err := p.read(in.Children, depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func resourceOf(element string) (string, bool) {
	for _, r := range resourceElements {
		if r.name == element {
			return r.resource, true
		}
	}
	return "", false
}

func (p *Prefs) setNo(resource string, no bool) {
	i := slices.Index(p.NoResource, resource)
	switch {
	case no && i < 0:
		p.NoResource = append(p.NoResource, resource)
	case !no && i >= 0:
		p.NoResource = slices.Delete(p.NoResource, i, i+1)
	}
}

// boolValue reads a flag as BOINC's parse_bool does: an empty element
// (<x/>) is true, otherwise a non-zero number.
func boolValue(s string) bool {
	if s == "" {
		return true
	}
	n, err := strconv.ParseFloat(s, 64)
	return err == nil && n != 0
}

func intValue(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

func attr(e element, name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func wrap(inner []byte) []byte {
	b := make([]byte, 0, len(inner)+7)
	b = append(b, "<x>"...)
	b = append(b, inner...)
	return append(b, "</x>"...)
}

// Format writes p as a <project_preferences> document, in the layout of
// BOINC's web pages (html/inc/prefs_project.inc and the sample
// project_specific_prefs.inc): beta and the processor types at the top
// level; the app selection (<apps_selected>), other apps and the job and
// CPU limits in <project_specific>; and the elements Parse kept,
// unchanged, after them.
// Always a document, never "": an empty one still replaces what a client
// holds from before.
func Format(p Prefs) string {
	var b strings.Builder
	b.WriteString("<project_preferences>\n")
	if p.AllowBeta {
		b.WriteString("<allow_beta_work>1</allow_beta_work>\n")
	}
	if p.NoGPUs {
		b.WriteString("<no_gpus>1</no_gpus>\n")
	}
	for _, r := range p.NoResource {
		if el := elementOf(r); el != "" {
			fmt.Fprintf(&b, "<%s>1</%s>\n", el, el)
		} else {
			b.WriteString("<no_rsc>")
			_ = xml.EscapeText(&b, []byte(r))
			b.WriteString("</no_rsc>\n")
		}
	}
	if len(p.Apps) > 0 || p.AllowNonSelected || p.MaxJobs > 0 || p.MaxCPUs > 0 || len(p.specific) > 0 {
		b.WriteString("<project_specific>\n")
		if len(p.Apps) > 0 {
			b.WriteString("<apps_selected>\n")
			for _, id := range p.Apps {
				fmt.Fprintf(&b, "<app_id>%d</app_id>\n", id)
			}
			b.WriteString("</apps_selected>\n")
		}
		if p.AllowNonSelected {
			b.WriteString("<allow_non_preferred_apps>1</allow_non_preferred_apps>\n")
		}
		if p.MaxJobs > 0 {
			fmt.Fprintf(&b, "<max_jobs>%d</max_jobs>\n", p.MaxJobs)
		}
		if p.MaxCPUs > 0 {
			fmt.Fprintf(&b, "<max_cpus>%d</max_cpus>\n", p.MaxCPUs)
		}
		writeKept(&b, p.specific)
		b.WriteString("</project_specific>\n")
	}
	writeKept(&b, p.top)
	b.WriteString("</project_preferences>\n")
	return b.String()
}

func elementOf(resource string) string {
	for _, r := range resourceElements {
		if r.resource == resource {
			return r.name
		}
	}
	return ""
}

func writeKept(w io.Writer, es []element) {
	for _, e := range es {
		out, err := xml.Marshal(e)
		if err != nil {
			continue // read from XML, so it writes back
		}
		_, _ = w.Write(out)
		_, _ = io.WriteString(w, "\n")
	}
}

// Inner returns what goes inside the reply's <project_preferences>: the
// stored document without its outer element ("" for none).
func Inner(doc string) string {
	doc = strings.TrimSpace(doc)
	const open, end = "<project_preferences>", "</project_preferences>"
	if strings.HasPrefix(doc, open) && strings.HasSuffix(doc, end) {
		return strings.TrimSpace(doc[len(open) : len(doc)-len(end)])
	}
	return doc
}
