package dataserver

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a download, the label of downloads_total.
const (
	dlOK         = "ok"          // 200, 206 or 304
	dlNotFound   = "not_found"   // no such file
	dlBadPath    = "bad_path"    // not /download/<fan-out dir>/<valid name>
	dlBadRange   = "bad_range"   // 416: the client has the whole file already
	dlBadMethod  = "bad_method"  // not GET or HEAD
	dlError      = "error"       // server-side failure
	dlOtherState = "other_state" // any other status ServeContent chose
)

// Outcomes of an upload request, the label of uploads_total.
const (
	upOK          = "ok"           // file complete
	upComplete    = "already_done" // file was complete before this request
	upSizeQuery   = "size_query"   // <get_file_size> answered
	upIncomplete  = "incomplete"   // body ended early; bytes kept, client resumes
	upBadRequest  = "bad_request"  // unparseable, or offsets that make no sense
	upBadName     = "bad_name"     // file name could escape or is unusable
	upBadCert     = "bad_cert"     // certificate missing or invalid
	upTooLarge    = "too_large"    // nbytes over max_nbytes or the server cap
	upBusy        = "busy"         // another request is writing the file
	upServerError = "server_error" // I/O failure; client retries
	upBadMethod   = "bad_method"   // not POST
	upRewrite     = "rewrite"      // a write to a finished or closed file: refused
	upNotAppend   = "not_append"   // an offset other than the stored size: the client re-queries the size
)

type metrics struct {
	downloads     *prometheus.CounterVec
	downloadBytes prometheus.Counter
	uploads       *prometheus.CounterVec
	uploadBytes   prometheus.Counter
	// permitted counts upload requests without a certificate let through
	// by an import permit (outputfile.Permit).
	permitted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		downloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskserver_dataserver_downloads_total",
			Help: "Download requests, by outcome.",
		}, []string{"outcome"}),
		downloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskserver_dataserver_download_bytes_total",
			Help: "Bytes of file content sent to clients.",
		}),
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskserver_dataserver_uploads_total",
			Help: "Upload handler requests (size queries and uploads), by outcome.",
		}, []string{"outcome"}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskserver_dataserver_upload_bytes_total",
			Help: "Bytes of uploaded file content written to disk.",
		}),
		permitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskserver_dataserver_upload_permits_used_total",
			Help: "Upload requests without an upload certificate accepted under an import permit (tasks imported from a BOINC project that signed none).",
		}),
	}
	// Start every outcome at zero so rates and alerts see the series.
	for _, o := range []string{dlOK, dlNotFound, dlBadPath, dlBadRange, dlBadMethod, dlError, dlOtherState} {
		m.downloads.WithLabelValues(o)
	}
	for _, o := range []string{upOK, upComplete, upSizeQuery, upIncomplete, upBadRequest, upBadName,
		upBadCert, upTooLarge, upBusy, upServerError, upBadMethod, upRewrite} {
		m.uploads.WithLabelValues(o)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.downloads, m.downloadBytes, m.uploads, m.uploadBytes, m.permitted} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("data server metrics: %w", err)
			}
		}
	}
	return m, nil
}
