package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	dsnA = "u@tcp(a:3306)/db"
	dsnB = "u@tcp(b:3306)/db"
	dsnC = "u@tcp(c:3306)/db"
)

// Not parallel: t.Setenv.
func TestDBDSNTakesAListEveryWay(t *testing.T) {
	dir := t.TempDir()
	n := 0
	file := func(body string) string {
		n++
		path := filepath.Join(dir, fmt.Sprintf("project%d.yaml", n))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, DefaultDBDSN},
		{"one flag", []string{"--db-dsn", dsnA}, nil, dsnA},
		{"comma list", []string{"--db-dsn", dsnA + "," + dsnB}, nil, dsnA + "," + dsnB},
		{"repeated flag", []string{"--db-dsn", dsnA, "--db-dsn", dsnB + "," + dsnC}, nil, dsnA + "," + dsnB + "," + dsnC},
		{"environment list", nil, map[string]string{"TASKSERVER_DB_DSN": dsnB + "," + dsnA}, dsnB + "," + dsnA},
		{"flag over environment", []string{"--db-dsn", dsnC}, map[string]string{"TASKSERVER_DB_DSN": dsnA + "," + dsnB}, dsnC},
		{"YAML list", []string{"--config", file("db-dsn:\n  - " + dsnA + "\n  - " + dsnB + "\n")}, nil, dsnA + "," + dsnB},
		{"YAML comma string", []string{"--config", file("db-dsn: " + dsnA + "," + dsnC + "\n")}, nil, dsnA + "," + dsnC},
		{"flag over YAML list", []string{"--config", file("db-dsn: [" + dsnA + ", " + dsnB + "]\n"), "--db-dsn", dsnC}, nil, dsnC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			com, _, err := runApp(t, tc.args, tc.env)
			if err != nil || com.DBDSN != tc.want {
				t.Errorf("db-dsn = %q, %v; want %q", com.DBDSN, err, tc.want)
			}
		})
	}
}

func TestDBFlagsDefaultsAndValidation(t *testing.T) {
	com, _, err := runApp(t, nil, nil)
	if err != nil || com.DBRetries != DefaultDBRetries || com.DBRetryBackoff != DefaultDBRetryBackoff {
		t.Fatalf("defaults: retries %d backoff %s, %v", com.DBRetries, com.DBRetryBackoff, err)
	}
	if com.DBRetriesOption() != DefaultDBRetries {
		t.Errorf("DBRetriesOption() = %d, want %d", com.DBRetriesOption(), DefaultDBRetries)
	}
	com, _, err = runApp(t, []string{"--db-retries", "0", "--db-retry-backoff", "250ms"}, nil)
	if err != nil || com.DBRetriesOption() >= 0 || com.DBRetryBackoff != 250*time.Millisecond {
		t.Errorf("--db-retries 0: option %d (want negative: none), backoff %s, %v", com.DBRetriesOption(), com.DBRetryBackoff, err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--db-retries", "-1"}, "--db-retries -1: want 0..100"},
		{[]string{"--db-retries", "101"}, "--db-retries 101: want 0..100"},
		{[]string{"--db-retry-backoff", "0s"}, "--db-retry-backoff 0s: want a positive duration"},
		{[]string{"--db-dsn", dsnA + ","}, "--db-dsn: address 2 of 2 is empty"},
		{[]string{"--db-dsn", dsnA + ",secret-password"}, "--db-dsn: address 2 of 2: invalid DSN"},
	}
	for _, tc := range cases {
		_, _, err := runApp(t, tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("args %v: error %v, want it to say %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-password") {
			t.Errorf("args %v: error %q shows the DSN's text, which may hold a password", tc.args, err)
		}
	}
}

func TestParseJoinsAListOnlyForListKeys(t *testing.T) {
	t.Parallel()
	got, err := Parse([]byte("db-dsn: [x, y]\n"))
	if err != nil || got["db-dsn"] != "x,y" {
		t.Errorf("Parse(db-dsn list) = %v, %v; want x,y", got, err)
	}
	if _, err := Parse([]byte("listen: [x, y]\n")); err == nil {
		t.Error("Parse accepted a list for a key that takes one value")
	}
	if _, err := Parse([]byte("db-dsn:\n  - {a: b}\n")); err == nil {
		t.Error("Parse accepted a mapping as a list item")
	}
}
