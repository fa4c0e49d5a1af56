package simclient

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// BOINC client exit statuses the simulated hosts report.
const (
	exitComputeError   = 1    // what a failing app returns
	errResultDownload  = -186 // ERR_RESULT_DOWNLOAD
	errResultUpload    = -187 // ERR_RESULT_UPLOAD
	errMD5Failed       = -119 // ERR_MD5_FAILED
	uploadFailedErrMsg = "permanent upload error"
)

// work runs one task: download its inputs, compute for the simulated time,
// upload its outputs. It returns the report and whether the task ended in
// an unrecoverable error. When ctx ends early the result is meaningless
// and the caller drops it.
func (h *host) work(ctx context.Context, t *task) (protocol.ReportResult, bool) {
	start := time.Now()
	var input []byte
	for _, fi := range t.inputs {
		var b []byte
		err := h.retry(ctx, &h.r.c.downloadErrors, func(attempt int) error {
			var err error
			b, err = h.r.web.download(ctx, fi, attempt)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return protocol.ReportResult{}, false
			}
			h.log.Debug("download failed", "result", t.res.Name, "error", err)
			exit := errResultDownload
			if errors.Is(err, errChecksum) {
				exit = errMD5Failed
			}
			return h.errorReport(t, state.ClientFilesDownloading, exit, time.Since(start), err.Error()), true
		}
		input = append(input, b...)
	}

	d := time.Duration(float64(h.computeTime()) * (0.9 + 0.2*h.rand()))
	// A failing host fails everything; every host fails a job the demo
	// app fails on (demoapp.FailMarker), as the real demo_app does.
	if h.kind == KindFailing || demoapp.Fails(input) {
		if !sleep(ctx, d/2) {
			return protocol.ReportResult{}, false
		}
		return h.errorReport(t, state.ClientComputeError, exitComputeError, d/2,
			"process exited with code 1 (0x1, -255)"), true
	}
	if !sleep(ctx, d) {
		return protocol.ReportResult{}, false
	}
	out := h.compute(input)
	h.r.c.computed.Add(1)
	h.r.c.byKind[h.kind].computed.Add(1)
	if h.kind == KindLate && !sleep(ctx, time.Until(h.lateUntil(t))) {
		return protocol.ReportResult{}, false
	}

	sum := md5hex(out)
	var files []protocol.ReportFileInfo
	for _, fi := range t.outputs {
		url := ""
		if urls := uploadURLs(fi); len(urls) > 0 {
			url = urls[0]
		}
		rf := protocol.ReportFileInfo{Name: fi.Name, Nbytes: float64(len(out)), MaxNbytes: fi.MaxNbytes,
			MD5Cksum: sum, UploadURL: url}
		err := h.retry(ctx, &h.r.c.uploadErrors, func(attempt int) error {
			return h.r.web.upload(ctx, fi, out, sum, attempt)
		})
		if err != nil {
			if ctx.Err() != nil {
				return protocol.ReportResult{}, false
			}
			h.log.Debug("upload failed", "result", t.res.Name, "error", err)
			rf.ErrorMsg = uploadFailedErrMsg
			rep := h.errorReport(t, state.ClientUploadFailed, errResultUpload, d, err.Error())
			rep.FileInfos = append(files, rf)
			return rep, true
		}
		files = append(files, rf)
	}
	h.r.c.uploaded.Add(1)
	rep := h.baseReport(t, state.ClientFilesUploaded, 0, d)
	rep.StderrOut = stderrOut("")
	rep.FileInfos = files
	return rep, false
}

// lateUntil is when a late host comes back online with task t: its report
// deadline plus LateBy × a random factor in [1, 2). A task without a
// deadline is not held.
func (h *host) lateUntil(t *task) time.Time {
	dl := t.res.ReportDeadline
	if !(dl > 0) {
		return time.Time{}
	}
	extra := time.Duration(float64(h.r.opts.LateBy) * (1 + h.rand()))
	return time.Unix(0, int64(dl*1e9)).Add(extra)
}

// compute is the demo app: the correct output, or for a cheater an output
// of the same shape computed from a slightly altered input, so its digest
// is wrong and differs from every other cheater's.
func (h *host) compute(input []byte) []byte {
	if h.kind != KindCheating {
		return demoapp.Compute(input, demoapp.Rounds)
	}
	h.r.c.cheated.Add(1)
	forged := append([]byte(nil), input...)
	for len(forged) < len(h.salt) {
		forged = append(forged, 0)
	}
	for i := range h.salt {
		forged[i] ^= h.salt[i]
	}
	return demoapp.Compute(forged, demoapp.Rounds)
}

// retry runs a transfer until it succeeds, fails permanently, runs out of
// attempts, or ctx ends, backing off between attempts. Every failed attempt
// is counted in errs.
func (h *host) retry(ctx context.Context, errs *atomic.Int64, f func(attempt int) error) error {
	o := h.r.opts
	for attempt := 0; ; attempt++ {
		err := f(attempt)
		if err == nil || ctx.Err() != nil {
			return err
		}
		errs.Add(1)
		if isPermanent(err) || attempt+1 >= o.TransferAttempts {
			return err
		}
		d := backoff(attempt+1, o.scaled(transferBackoffMin), o.scaled(transferBackoffMax), h.rand())
		h.log.Debug("transfer failed; retrying", "error", err, "attempt", attempt+1, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// sleep waits d or until ctx ends; it reports whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
