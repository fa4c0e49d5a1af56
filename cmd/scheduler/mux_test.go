package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
}

func TestMuxRoutes(t *testing.T) {
	t.Parallel()
	r := routes{scheduler: named("scheduler"), dataServer: named("data"), master: named("master"), accounts: named("accounts")}
	for _, tt := range []struct {
		mux         *http.ServeMux
		method, url string
		want        string
	}{
		{newMux(r), http.MethodPost, "/scheduler", "scheduler"},
		{newMux(r), http.MethodPost, "/cgi", "scheduler"},
		{newMux(r), http.MethodGet, "/download/1a/wu_in", "data"},
		{newMux(r), http.MethodPost, "/file_upload_handler", "data"},
		{newMux(r), http.MethodGet, "/metrics", "master"},
		{newMux(r), http.MethodGet, "/healthz", "master"},
		{newMux(r), http.MethodGet, "/", "master"},
		{newMux(r), http.MethodGet, "/get_project_config.php", "accounts"},
		{newMux(r), http.MethodGet, "/lookup_account.php?email_addr=a%40b%2Ec&passwd_hash=x", "accounts"},
		{newMux(r), http.MethodGet, "/create_account.php?email_addr=a%40b%2Ec", "accounts"},
	} {
		rec := httptest.NewRecorder()
		tt.mux.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.url, nil))
		if got := rec.Body.String(); got != tt.want {
			t.Errorf("%s %s went to %q, want %q", tt.method, tt.url, got, tt.want)
		}
	}
}
