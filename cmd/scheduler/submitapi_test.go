package main

import (
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// submitAPIContext parses args with the common and submission API flags
// into a context, without running a cli app (see COMMON.md on the help flag
// race).
func submitAPIContext(t *testing.T, args ...string) *cli.Context {
	t.Helper()
	set := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	for _, f := range append(config.CommonFlags(""), submitAPIFlags()...) {
		if err := f.Apply(set); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cli.NewContext(nil, set, nil)
}

func TestMountSubmitAPI(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	tests := []struct {
		name  string
		args  []string
		want  int
		error bool
	}{
		{"off by default", nil, http.StatusNotFound, false},
		{"on: asks for a key", []string{"--submit-api"}, http.StatusUnauthorized, false},
		{"tiny body limit", []string{"--submit-api", "--submit-api-max-body-bytes", "10"}, 0, true},
		{"empty results directory", []string{"--submit-api", "--results-dir", ""}, 0, true},
	}
	for _, tc := range tests {
		mux := http.NewServeMux()
		err := mountSubmitAPI(submitAPIContext(t, append([]string{"--project-dir", dir}, tc.args...)...), mux, st, prometheus.NewRegistry(), log)
		if (err != nil) != tc.error {
			t.Fatalf("%s: mountSubmitAPI = %v, want error %v", tc.name, err, tc.error)
		}
		if tc.error {
			continue
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/batches", nil))
		if rec.Code != tc.want {
			t.Errorf("%s: GET /api/v1/batches = %d, want %d", tc.name, rec.Code, tc.want)
		}
	}
}
