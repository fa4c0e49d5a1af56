package statuspage

import (
	"fmt"
	"html/template"
	"math"
	"time"
)

// pageData is what the HTML template sees.
type pageData struct {
	Title   string
	Refresh int
	Error   string
	S       Status
}

// page is the status page: plain HTML and a little CSS; the meta refresh
// is its only moving part. Every number has an id, so a test (or a
// scraper) finds it without parsing the layout.
var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"age":  ageText,
	"time": func(unix int64) string { return time.Unix(unix, 0).UTC().Format(time.RFC3339) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{{if gt .Refresh 0}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; margin-top: .3em; }
th, td { border: 1px solid #ccc; padding: .25em .7em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.up { background: #d7f5d7; } .failing { background: #fff0c2; } .down { background: #f9d0d0; } .unknown { background: #eee; }
.error { color: #a00; font-weight: bold; }
.section { display: inline-block; vertical-align: top; margin-right: 2em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p>As of <span id="time">{{time .S.Time}}</span>{{if gt .Refresh 0}}; this page reloads every {{.Refresh}} s{{end}}. The same data as JSON: <a href="status.json">status.json</a>.</p>
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{else}}
<h2>Daemons</h2>
{{if .S.Daemons}}<table id="daemons">
<tr><th>Daemon</th><th>Address</th><th>State</th><th>Last successful pass</th><th>Problem</th></tr>
{{range .S.Daemons}}<tr id="daemon-{{.Name}}" class="{{.State}}"><td>{{.Name}}</td><td>{{.Address}}</td><td class="state">{{.State}}</td><td>{{if .LastSuccessAgeSeconds}}{{age .LastSuccessAgeSeconds}} ago{{else}}-{{end}}</td><td>{{.Error}}</td></tr>
{{end}}</table>{{else}}<p>No daemons are configured (the configuration file has no <code>daemons:</code> section).</p>{{end}}
<div class="section">
<h2>Queues</h2>
<table id="queues">
{{with .S.Queues}}<tr><td>Unsent results</td><td class="n" id="unsent_results">{{.UnsentResults}}</td></tr>
<tr><td>Results in progress</td><td class="n" id="in_progress_results">{{.InProgressResults}}</td></tr>
<tr><td>Jobs due for transition</td><td class="n" id="jobs_due_transition">{{.JobsDueTransition}}</td></tr>
<tr><td>Oldest due transition (s behind)</td><td class="n" id="oldest_due_transition_age_seconds">{{.OldestDueTransitionAgeSeconds}}</td></tr>
<tr><td>Jobs awaiting validation</td><td class="n" id="jobs_awaiting_validation">{{.JobsAwaitingValidation}}</td></tr>
<tr><td>Jobs awaiting assimilation</td><td class="n" id="jobs_awaiting_assimilation">{{.JobsAwaitingAssimilation}}</td></tr>
<tr><td>Job files awaiting deletion</td><td class="n" id="job_files_awaiting_deletion">{{.JobFilesAwaitingDeletion}}</td></tr>
<tr><td>Result files awaiting deletion</td><td class="n" id="result_files_awaiting_deletion">{{.ResultFilesAwaitingDeletion}}</td></tr>
<tr><td>Jobs failed</td><td class="n" id="jobs_failed">{{.JobsFailed}}</td></tr>
<tr><td>Jobs held</td><td class="n" id="jobs_held">{{.JobsHeld}}</td></tr>{{end}}
</table>
</div>
<div class="section">
<h2>Results in progress by app</h2>
{{if .S.InProgressByApp}}<table id="in_progress_by_app">
<tr><th>App</th><th>In progress</th></tr>
{{range .S.InProgressByApp}}<tr><td>{{.App}}</td><td class="n" id="in_progress-{{.App}}">{{.Count}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Recent throughput</h2>
<table id="throughput">
<tr><th></th><th>Last hour</th><th>Last 24 hours</th></tr>
{{with .S.Throughput}}<tr><td>Results reported</td><td class="n" id="hour_results_reported">{{.LastHour.ResultsReported}}</td><td class="n" id="day_results_reported">{{.LastDay.ResultsReported}}</td></tr>
<tr><td>Results validated</td><td class="n" id="hour_results_validated">{{.LastHour.ResultsValidated}}</td><td class="n" id="day_results_validated">{{.LastDay.ResultsValidated}}</td></tr>
<tr><td>Jobs assimilated</td><td class="n" id="hour_jobs_assimilated">{{.LastHour.JobsAssimilated}}</td><td class="n" id="day_jobs_assimilated">{{.LastDay.JobsAssimilated}}</td></tr>{{end}}
</table>
</div>
<div class="section">
<h2>Results by state</h2>
<table id="results">
<tr><th>Server state</th><th>Outcome</th><th>Results</th></tr>
{{range .S.Results}}<tr><td>{{.ServerState}}</td><td>{{.Outcome}}</td><td class="n" id="results-{{.ServerState}}-{{.Outcome}}">{{.Count}}</td></tr>
{{else}}<tr><td>-</td><td>-</td><td class="n">0</td></tr>
{{end}}</table>
<p>Jobs: <span id="jobs_total">{{.S.Workunits.Total}}</span>; results: <span id="results_total">{{.S.ResultFiles.Total}}</span>.</p>
</div>
{{end}}
</body>
</html>
`))

// ageText writes a duration in seconds the way an operator reads it:
// "42 s", "3 min", "2 h 5 min", "3 d 4 h".
func ageText(p *float64) string {
	if p == nil {
		return "-"
	}
	s := int64(math.Round(*p))
	switch {
	case s < 120:
		return fmt.Sprintf("%d s", s)
	case s < 2*3600:
		return fmt.Sprintf("%d min", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%d h %d min", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%d d %d h", s/86400, s%86400/3600)
	}
}
