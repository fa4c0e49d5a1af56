package main

import (
	"net/http"
)

// routes are the handlers the scheduler's HTTP address serves.
type routes struct {
	scheduler  http.Handler // POST /scheduler and /cgi: the scheduler RPC
	dataServer http.Handler // GET /download/..., POST /file_upload_handler
	master     http.Handler // GET /: the master page
	accounts   http.Handler // GET /get_project_config.php, /lookup_account.php, /create_account.php
}

// newMux puts the project's public endpoints on one address: a volunteer
// attaches to the master page, which names the scheduler, whose replies name
// the download and upload URLs under the same base. /metrics and /healthz
// are never among them: they are on the admin address (--listen).
func newMux(r routes) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/scheduler", r.scheduler)
	mux.Handle("/cgi", r.scheduler) // BOINC's name for it, for clients attached to an old URL
	mux.Handle("/download/", r.dataServer)
	mux.Handle("/file_upload_handler", r.dataServer)
	if r.accounts != nil {
		// Relative to the master URL, where the client looks for them.
		for _, p := range []string{"/get_project_config.php", "/lookup_account.php", "/create_account.php"} {
			mux.Handle(p, r.accounts)
		}
	}
	mux.Handle("/", r.master)
	return mux
}
