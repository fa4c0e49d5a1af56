// Package dataserver is the project's data server: it serves job input and
// app files to clients (GET /download/<dir>/<name>, with Range support so
// interrupted downloads resume) and accepts their output files through
// BOINC's upload protocol (POST /file_upload_handler, PROTOCOL.md §8).
//
// It reads and writes files only, never the database. An upload is
// authorised by its upload certificate, a signature over the file's name and
// size limit made with the project's upload key (RSA, or the cheaper
// Ed25519 key: package keys) when the job was sent, so
// the data server needs no knowledge of jobs: it checks the signature, the
// size and the name, and writes at most max_nbytes bytes to the file's
// fan-out path under the upload directory.
package dataserver

import (
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

// Options configure a Handler.
type Options struct {
	// DownloadDir holds the files clients download, in fan-out
	// sub-directories. Created if missing.
	DownloadDir string
	// UploadDir receives uploaded files, in fan-out sub-directories.
	// Created if missing.
	UploadDir string
	// Fanout is the number of fan-out sub-directories (see package fanout);
	// it must match what the scheduler puts in URLs and what the other
	// programs use.
	Fanout int
	// UploadKey checks upload certificates signed with the BOINC RSA
	// upload key. With UploadCertKeys a certificate signed by any of them
	// is accepted, so instances sent before a project switched keys still
	// upload. Both empty turns the check off, which is unsafe: anyone who
	// can reach the server can then write any file name of any size up to
	// the max_nbytes they claim, so set MaxFileBytes too.
	UploadKey *rsa.PublicKey
	// UploadCertKeys check upload certificates signed with Ed25519 upload
	// certificate keys: the current one and, after a rotation, previous
	// ones whose instances may still be uploading.
	UploadCertKeys []ed25519.PublicKey
	// MaxFileBytes caps every uploaded file whatever its certificate says.
	// 0 means no cap beyond max_nbytes.
	MaxFileBytes int64
	// MaxHeaderBytes bounds the XML header of an upload request. 0 means
	// protocol.DefaultMaxUploadHeader (16 KiB); the real client's is about
	// 700 bytes.
	MaxHeaderBytes int
	// Logger receives transient failures and refusals. Nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// Handler serves downloads and uploads. Its methods are safe for
// concurrent use.
type Handler struct {
	opts     Options
	certs    keys.UploadVerifier
	download *os.Root
	upload   *os.Root
	log      *slog.Logger
	metrics  *metrics
}

// Paths the handler answers, relative to where it is mounted.
const (
	DownloadPrefix = "/download/"
	UploadPath     = "/file_upload_handler"
)

// New opens the directories and builds a Handler. Files are reached only
// through os.Root, so no name, ".." or symbolic link can lead outside them.
func New(opts Options) (*Handler, error) {
	if opts.DownloadDir == "" || opts.UploadDir == "" {
		return nil, errors.New("data server: download and upload directories are required")
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = protocol.DefaultMaxUploadHeader
	}
	for i, k := range opts.UploadCertKeys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("data server: upload certificate key %d is %d bytes, want %d", i, len(k), ed25519.PublicKeySize)
		}
	}
	if opts.MaxFileBytes < 0 {
		return nil, fmt.Errorf("data server: negative max file size %d", opts.MaxFileBytes)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	down, err := openRoot(opts.DownloadDir)
	if err != nil {
		return nil, err
	}
	up, err := openRoot(opts.UploadDir)
	if err != nil {
		down.Close()
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	certs := keys.UploadVerifier{RSA: opts.UploadKey, Ed25519: opts.UploadCertKeys}
	return &Handler{opts: opts, certs: certs, download: down, upload: up, log: log, metrics: m}, nil
}

func openRoot(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data server: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("data server: %w", err)
	}
	return r, nil
}

// Close releases the directory handles.
func (h *Handler) Close() error {
	return errors.Join(h.download.Close(), h.upload.Close())
}

// ServeHTTP routes GET/HEAD /download/<dir>/<name> and POST
// /file_upload_handler; anything else is 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, DownloadPrefix):
		h.serveDownload(w, r)
	case r.URL.Path == UploadPath:
		h.serveUpload(w, r)
	default:
		http.NotFound(w, r)
	}
}
