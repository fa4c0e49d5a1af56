package simclient

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/taskserver/taskserver/internal/protocol"
)

// maxBody bounds any response body the simulated client reads.
const maxBody = 64 << 20

// errChecksum marks a download whose md5 does not match its file_info.
var errChecksum = errors.New("checksum mismatch")

// transferError is a failed HTTP exchange; permanent ones are not retried
// (PROTOCOL.md §1: 4xx is permanent, 5xx and connection errors transient,
// and for uploads 404 is transient too).
type transferError struct {
	permanent bool
	err       error
}

func (e *transferError) Error() string { return e.err.Error() }
func (e *transferError) Unwrap() error { return e.err }

func permanent(err error) *transferError { return &transferError{permanent: true, err: err} }
func transient(err error) *transferError { return &transferError{err: err} }

// isPermanent reports whether err is a transfer failure not worth retrying.
func isPermanent(err error) bool {
	var te *transferError
	return errors.As(err, &te) && te.permanent
}

// web does the HTTP side of a host: scheduler RPCs, downloads and uploads.
type web struct {
	client  *http.Client
	timeout time.Duration
}

// do sends req and returns the body of a 2xx reply, or a transferError.
// upload makes a 404 transient, as the real client treats it for uploads.
func (w *web) do(ctx context.Context, method, url string, body []byte, upload bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, permanent(fmt.Errorf("%s %s: %w", method, url, err))
	}
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", formContentType)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, transient(err) // a *url.Error already names the method and URL
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, transient(fmt.Errorf("%s %s: read reply: %w", method, url, err))
	}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return b, nil
	case c >= 500, upload && c == http.StatusNotFound:
		return nil, transient(fmt.Errorf("%s %s: HTTP %s", method, url, resp.Status))
	default:
		return nil, permanent(fmt.Errorf("%s %s: HTTP %s", method, url, resp.Status))
	}
}

// schedulerRPC posts a request and parses the reply. Any failure, HTTP or
// parse, is one failed RPC to the caller.
//
// coprocs, when not empty, is the request's <coprocs> element, put where
// the real client writes it.
func (w *web) schedulerRPC(ctx context.Context, url string, req *protocol.SchedulerRequest, coprocs []byte) (*protocol.SchedulerReply, error) {
	body, err := encodeRequest(req)
	if err != nil {
		return nil, err
	}
	if len(coprocs) > 0 {
		body = spliceCoprocs(body, coprocs)
	}
	b, err := w.do(ctx, http.MethodPost, url, body, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler rpc: %w", err)
	}
	return decodeReply(b)
}

// get fetches a page (a project's master page).
func (w *web) get(ctx context.Context, url string) ([]byte, error) {
	return w.do(ctx, http.MethodGet, url, nil, false)
}

// download fetches one input file from its URLs, trying them in turn
// over attempts, and checks its size and md5 when the file_info gives
// them. A file with gzipped_url is fetched from those only, as the real
// client does, and gunzipped before the checks. A wrong size or checksum is
// permanent, as in the real client.
func (w *web) download(ctx context.Context, fi protocol.FileInfo, attempt int) ([]byte, error) {
	urls, gz := fi.URLs, len(fi.GzippedURLs) > 0
	if gz {
		urls = fi.GzippedURLs
	}
	if len(urls) == 0 {
		return nil, permanent(fmt.Errorf("download %s: no url", fi.Name))
	}
	url := urls[attempt%len(urls)]
	b, err := w.do(ctx, http.MethodGet, url, nil, false)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", fi.Name, err)
	}
	if gz {
		if fi.GzippedNbytes > 0 && float64(len(b)) != fi.GzippedNbytes {
			return nil, permanent(fmt.Errorf("download %s: got %d gzip'd bytes, want %.0f", fi.Name, len(b), fi.GzippedNbytes))
		}
		if b, err = gunzip(b); err != nil {
			return nil, permanent(fmt.Errorf("download %s: %s: %w", fi.Name, url, err))
		}
	}
	if fi.Nbytes > 0 && float64(len(b)) != fi.Nbytes {
		return nil, permanent(fmt.Errorf("download %s: got %d bytes, want %.0f", fi.Name, len(b), fi.Nbytes))
	}
	if fi.MD5Cksum != "" {
		if sum := md5hex(b); sum != fi.MD5Cksum {
			return nil, permanent(fmt.Errorf("download %s: md5 %s, want %s: %w", fi.Name, sum, fi.MD5Cksum, errChecksum))
		}
	}
	return b, nil
}

// upload sends one whole output file to its upload URL. Status -1 from
// the data server is permanent; any other non-zero status is transient.
func (w *web) upload(ctx context.Context, fi protocol.FileInfo, data []byte, sum string, attempt int) error {
	urls := uploadURLs(fi)
	if len(urls) == 0 {
		return permanent(fmt.Errorf("upload %s: no url", fi.Name))
	}
	body, err := uploadBody(fi, data, sum)
	if err != nil {
		return permanent(fmt.Errorf("upload %s: %w", fi.Name, err))
	}
	b, err := w.do(ctx, http.MethodPost, urls[attempt%len(urls)], body, true)
	if err != nil {
		return fmt.Errorf("upload %s: %w", fi.Name, err)
	}
	switch status, msg := uploadStatus(b); {
	case status == 0:
		return nil
	case status < 0:
		return permanent(fmt.Errorf("upload %s: data server status %d: %s", fi.Name, status, msg))
	default:
		return transient(fmt.Errorf("upload %s: data server status %d: %s", fi.Name, status, msg))
	}
}

// gunzip is b decompressed, at most maxBody bytes.
func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxBody))
	if err != nil {
		return nil, err
	}
	return out, zr.Close()
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}
