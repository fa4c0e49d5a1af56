package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestUnescape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                "plain",
		"a&amp;b":              "a&b",
		"&lt;&gt;&quot;&apos;": `<>"'`,
		"&#65;&#x42;&#X43;":    "ABC",
		"&#0;&#xD800;&#-1;":    "&#0;&#xD800;&#-1;",
		"& &; &unknown; &":     "& &; &unknown; &",
		"&amp":                 "&amp",
		"&#1114111;":           "\U0010FFFF",
		"&#1114112;":           "&#1114112;",
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"  a  ":                            "a",
		"<![CDATA[x &amp; <y>]]> &amp; z":  "x &amp; <y> & z",
		"a<![CDATA[unterminated &amp;":     "aunterminated &amp;",
		"\n<![CDATA[\n<stderr_txt>\n]]>\n": "<stderr_txt>",
	} {
		if got := decodeText(in); got != want {
			t.Errorf("decodeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestScanLinear guards against inputs that make the scanner quadratic;
// each is 4 MB and must parse in well under a second.
func TestScanLinear(t *testing.T) {
	t.Parallel()
	const n = 4 << 20
	lim := Limits{MaxBytes: 1 << 30, MaxDepth: 32, MaxElements: 1 << 20}
	for name, body := range map[string]string{
		"ampersands in a value": "<scheduler_request><authenticator>" + strings.Repeat("&", n) + "</authenticator></scheduler_request>",
		"less-thans":            "<scheduler_request>" + strings.Repeat("<", n) + "</scheduler_request>",
		"broken tags":           "<scheduler_request>" + strings.Repeat("<a b=", n/5) + "</scheduler_request>",
		"broken close tags":     "<scheduler_request>" + strings.Repeat("</a ", n/4) + "</scheduler_request>",
		"open quote":            "<scheduler_request>" + strings.Repeat(`<a b="`, n/6) + "</scheduler_request>",
	} {
		start := time.Now()
		req, err := ParseSchedulerRequestLimits(strings.NewReader(body), lim)
		if err != nil {
			t.Errorf("%s: error %v", name, err)
			continue
		}
		_ = req
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: parse took %v, want linear time", name, d)
		}
	}
}
