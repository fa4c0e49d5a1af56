package schema

import (
	"regexp"
	"strings"
	"testing"
)

// TestEveryTableNamesItsCharacterSet: a table created without naming one
// takes the server's default character set, latin1 on a server without a
// configuration file, where text outside Latin-1 cannot be stored.
func TestEveryTableNamesItsCharacterSet(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	create := regexp.MustCompile(`(?is)^CREATE\s+TABLE`)
	n := 0
	for _, m := range migs {
		for _, st := range Statements(m.SQL) {
			if !create.MatchString(st) {
				continue
			}
			n++
			if !strings.HasSuffix(st, ") "+TableOptions) {
				t.Errorf("%s: %q does not end with %q", m.Name, abbrev(st), ") "+TableOptions)
			}
		}
	}
	if n == 0 {
		t.Fatal("no CREATE TABLE found; the test checks nothing")
	}
}

func abbrev(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
