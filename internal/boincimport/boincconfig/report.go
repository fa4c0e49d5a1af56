package boincconfig

import (
	"fmt"
	"io"
	"strings"
)

// Kind says why an option or daemon was not carried over.
type Kind int

// The reasons an option is left out.
const (
	// NoEquivalent: this server has no such setting (or needs none).
	NoEquivalent Kind = iota + 1
	// Differs: this server does the thing, but its own way or with a
	// different default, and the option cannot change that.
	Differs
	// OperatorAction: the operator has to do something for the old
	// behaviour to carry on (route a URL, port a program, move files).
	OperatorAction
	// Disabled: a daemon or task the old project had turned off.
	Disabled
)

// String is the heading the report prints the kind under.
func (k Kind) String() string {
	switch k {
	case NoEquivalent:
		return "no equivalent here"
	case Differs:
		return "our behaviour or default differs"
	case OperatorAction:
		return "needs operator action"
	case Disabled:
		return "disabled in the old project"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Mapped is an option carried over.
type Mapped struct {
	Option string   // BOINC option, daemon or task ("daemon feeder -d 3")
	Value  string   // its value as read (a password is shown as "(hidden)")
	Keys   []string // project file keys it set; none when our default already is the old behaviour
	Note   string   // what differs, if anything
}

// Unmapped is an option, daemon or task left out.
type Unmapped struct {
	Option string
	Value  string
	Kind   Kind
	Reason string
}

// Report lists what the conversion did with every option, daemon and task.
type Report struct {
	Mapped   []Mapped
	Unmapped []Unmapped
}

func (r *Report) mapped(option, value, note string, keys ...string) {
	r.Mapped = append(r.Mapped, Mapped{Option: option, Value: value, Keys: keys, Note: note})
}

func (r *Report) unmapped(option, value string, kind Kind, reason string) {
	r.Unmapped = append(r.Unmapped, Unmapped{Option: option, Value: value, Kind: kind, Reason: reason})
}

// Find returns the unmapped entries for option.
func (r *Report) Find(option string) []Unmapped {
	var out []Unmapped
	for _, u := range r.Unmapped {
		if u.Option == option {
			out = append(out, u)
		}
	}
	return out
}

// WriteText writes the report for a person: what was carried over and to
// which keys, then what was not, grouped by reason, actions first.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Carried over (%d):\n", len(r.Mapped))
	for _, m := range r.Mapped {
		fmt.Fprintf(&b, "  %s", m.Option)
		if m.Value != "" {
			fmt.Fprintf(&b, " = %s", oneLine(m.Value))
		}
		if len(m.Keys) > 0 {
			fmt.Fprintf(&b, "  ->  %s", strings.Join(m.Keys, ", "))
		} else {
			b.WriteString("  ->  (nothing to set)")
		}
		b.WriteString("\n")
		if m.Note != "" {
			fmt.Fprintf(&b, "      %s\n", m.Note)
		}
	}
	fmt.Fprintf(&b, "\nNot carried over (%d):\n", len(r.Unmapped))
	for _, k := range []Kind{OperatorAction, Differs, NoEquivalent, Disabled} {
		first := true
		for _, u := range r.Unmapped {
			if u.Kind != k {
				continue
			}
			if first {
				fmt.Fprintf(&b, "  %s:\n", k)
				first = false
			}
			fmt.Fprintf(&b, "    %s", u.Option)
			if u.Value != "" {
				fmt.Fprintf(&b, " = %s", oneLine(u.Value))
			}
			fmt.Fprintf(&b, "\n        %s\n", u.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine keeps a value on the report's line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
