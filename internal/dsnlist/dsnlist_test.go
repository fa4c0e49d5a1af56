package dsnlist

import (
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		list  string
		addrs []string // nil: an error
	}{
		{"u@tcp(a:3306)/db", []string{"a:3306"}},
		{"u@tcp(a:3306)/db, u@tcp(b:3306)/db", []string{"a:3306", "b:3306"}},
		{"u@tcp(a:3306)/db,u@tcp(b:3306)/db?sql_mode=A%2CB", []string{"a:3306", "b:3306"}},
		// A password with a comma, in a DSN given alone, as before lists.
		{"u:pa,ss@tcp(a:3306)/db", []string{"a:3306"}},
		{"", nil},
		{"u@tcp(a:3306)/db,", nil},
		{"u@tcp(a:3306)/db,,u@tcp(b:3306)/db", nil},
	}
	for _, tc := range cases {
		cfgs, err := Split(tc.list)
		if tc.addrs == nil {
			if err == nil {
				t.Errorf("Split(%q) = %d addresses, want an error", tc.list, len(cfgs))
			}
			continue
		}
		var got []string
		for _, c := range cfgs {
			got = append(got, c.Addr)
		}
		if err != nil || strings.Join(got, " ") != strings.Join(tc.addrs, " ") {
			t.Errorf("Split(%q) = %v, %v; want %v", tc.list, got, err, tc.addrs)
		}
	}
	cfgs, _ := Split("u@tcp(a:3306)/db,u@tcp(b:3306)/db?sql_mode=A%2CB")
	if v := cfgs[1].Params["sql_mode"]; v != "A,B" {
		t.Errorf("an encoded comma reads %q, want A,B", v)
	}
	if u := cfgs[0].User; u != "u" {
		t.Errorf("user %q", u)
	}
}

func TestSplitReadsAGarbledListAsAnError(t *testing.T) {
	t.Parallel()
	// Read whole, this would be one DSN of database "db,secret": a
	// mistake, not a password with a comma.
	if cfgs, err := Split("u@tcp(a:3306)/db,secret"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Split = %d addresses, %v; want an error that does not show the text", len(cfgs), err)
	}
}
