package statsexport

import (
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

func TestEscapeIsBOINCs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain name", "plain name"},
		{"a<b&c>d", "a&lt;b&amp;c>d"},
		{`quotes "and" 'apostrophes'`, `quotes "and" 'apostrophes'`},
		{"José", "Jos&#195;&#169;"},
		{"日本", "&#230;&#151;&#165;&#230;&#156;&#172;"},
		{"tab\tnewline\ncr\r", "tab&#9;newline&#10;cr&#13;"},
		{"bell\x07 and \x1f dropped", "bell and  dropped"},
		{"x]]>y", "x]]&gt;y"},
		{"]]", "]]"},
		{"]]]>", "]]]&gt;"},
		{"", ""},
	} {
		if got := string(appendEscaped(nil, tc.in)); got != tc.want {
			t.Errorf("appendEscaped(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFloatIsCsPercentF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0.000000"},
		{1.5, "1.500000"},
		{123456789.123456789, "123456789.123457"},
		{1e20, "100000000000000000000.000000"},
		{0.0000004, "0.000000"},
		{0.0000005000001, "0.000001"},
	} {
		if got := string(appendFloat(nil, tc.in)); got != tc.want {
			t.Errorf("appendFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The expected hashes were computed apart from this code, with
// `printf '%s' abcx@y | md5sum`.
func TestPublicIDsAreHashedWithTheEmail(t *testing.T) {
	t.Parallel()
	if got, want := userCPID(row.StatsUser{CrossProjectID: "abc", EmailAddr: "x@y"}), "e31d005d6e0c1d696912e841b876f4da"; got != want {
		t.Errorf("userCPID(abc, x@y) = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		name string
		h    row.StatsHost
		want string
	}{
		{"as stored (hashed by the scheduler)", row.StatsHost{HostCPID: "e31d005d6e0c1d696912e841b876f4da", OwnerFound: true},
			"e31d005d6e0c1d696912e841b876f4da"},
		{"none reported", row.StatsHost{OwnerFound: true}, ""},
		{"owner gone", row.StatsHost{HostCPID: "abc"}, ""},
	} {
		if got := hostCPID(tc.h); got != tc.want {
			t.Errorf("%s: hostCPID = %q, want %q", tc.name, got, tc.want)
		}
	}
}
