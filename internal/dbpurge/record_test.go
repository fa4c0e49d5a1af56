package dbpurge

import (
	"bytes"
	"encoding/xml"
	"testing"
)

// escapeText must write what xml.EscapeText writes, so that the archive
// format does not depend on which path a value took.
func FuzzEscapeText(f *testing.F) {
	for _, s := range []string{"", "plain text 123", "<stderr_txt>a < b & \"c\"\n</stderr_txt>", "tab\there",
		"it's", "caf\u00e9", "\x00\x7f", "\xff\xfe", "\r\n", "]]>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got, want bytes.Buffer
		escapeText(&got, s)
		_ = xml.EscapeText(&want, []byte(s))
		if got.String() != want.String() {
			t.Fatalf("escapeText(%q) = %q, want xml.EscapeText's %q", s, got.String(), want.String())
		}
	})
}
