package fanout

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ok   bool
	}{
		{"wu_123_in", true},
		{"result_0_r1_out.gz", true},
		{"", false},
		{"..", false},
		{"../etc/passwd", false},
		{"a/b", false},
		{`a\b`, false},
		{"a..b", false},
		{"bad%name", false},
		{"nul\x00", false},
		{"new\nline", false},
	}
	for _, c := range cases {
		err := ValidName(c.name)
		if (err == nil) != c.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrBadName) {
			t.Errorf("ValidName(%q) error %v is not ErrBadName", c.name, err)
		}
	}
}

func TestPathIsStableAndInsideRoot(t *testing.T) {
	t.Parallel()
	p1, err := Path("/root/dl", "wu_1_in", 1024)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := Path("/root/dl", "wu_1_in", 1024)
	if p1 != p2 {
		t.Fatalf("Path not stable: %q vs %q", p1, p2)
	}
	if filepath.Dir(filepath.Dir(p1)) != "/root/dl" || filepath.Base(p1) != "wu_1_in" {
		t.Fatalf("Path = %q, want /root/dl/<bucket>/wu_1_in", p1)
	}
	if _, err := Path("/root/dl", "../x", 1024); err == nil {
		t.Fatal("Path accepted ../x")
	}
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		seen[Dir(filepath.Join("f", string(rune('a'+i%26)), string(rune(i))), 16)] = true
	}
	if len(seen) != 16 {
		t.Fatalf("fan-out 16 used %d buckets over 2000 names, want 16", len(seen))
	}
}
