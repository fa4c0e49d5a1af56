package scheduler

import (
	"fmt"
	"html"
	"net/http"
	"strings"
)

// MasterPage serves the project's master page: the page at the URL
// volunteers attach to, from which the client reads the scheduler URL. The
// client scans it line by line and misses a <link> tag that is indented, so
// both forms it knows are written at the start of their own short lines
// (PROTOCOL.md §2.3).
func MasterPage(projectName, schedulerURL string) http.Handler {
	name := html.EscapeString(projectName)
	if name == "" {
		name = "Task server project"
	}
	// The client does not unescape the URL; one that needed escaping could
	// not be written here at all.
	u := strings.NewReplacer(`"`, "%22", "<", "%3C", ">", "%3E").Replace(schedulerURL)
	page := fmt.Sprintf(`<!DOCTYPE html>
<html><head><title>%s</title>
<link rel="boinc_scheduler" href="%s">
</head><body>
<!--
<scheduler>%s</scheduler>
-->
<h1>%s</h1>
<p>This is a volunteer computing project. To take part, attach a BOINC client to this page's URL.</p>
</body></html>
`, name, u, u, name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})
}
