// Package httpserve builds the HTTP servers of every program, all with the
// same defences against a client that holds a connection open without
// using it (slowloris): a deadline for the request headers, a minimum
// transfer rate for the request body and for the response, an idle
// timeout between requests, and a bound on the headers' size. No program
// builds an http.Server any other way.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Defaults of Options.
const (
	// DefaultReadHeaderTimeout is ample for a request line and headers of
	// a few hundred bytes, even on a slow line.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout keeps a connection for a client's next request
	// (the BOINC client fetches a task's files one after another).
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes is far above what a BOINC client or a browser
	// sends, and far below net/http's 1 MiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMinBytesPerSecond and DefaultMinRateWindow: a transfer must
	// move 1 KiB/s on average over each minute. A volunteer at dial-up
	// speed (7 kB/s) is far above it; a connection that trickles a byte
	// every few seconds is closed within a minute. (The BOINC client
	// itself gives up below 10 bytes/s over 300 s.)
	DefaultMinBytesPerSecond = 1024
	DefaultMinRateWindow     = time.Minute
	// shutdownGrace is how long Serve lets requests in flight finish.
	shutdownGrace = 10 * time.Second
)

// Options configure a server; zero fields take the defaults above.
type Options struct {
	// ReadHeaderTimeout bounds reading one request's line and headers.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no next
	// request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MinRate is the least rate at which a request body must arrive and
	// a response must be taken (see MinRate).
	MinRate MinRate
	// Metrics counts transfers cut for being too slow; nil counts none.
	Metrics *Metrics
}

// MinRate is a minimum transfer rate: every Window, at least
// BytesPerSecond × Window bytes of the request body (while the handler
// reads it) and of the response (while the handler writes it) must move,
// or the connection's deadline passes and the server closes it. The
// deadline moves forward each time that much has moved, so a transfer of
// any length at or above the rate is never cut, and a small body or
// response simply has Window to arrive or leave.
type MinRate struct {
	BytesPerSecond int64
	Window         time.Duration
}

// quota is the bytes that must move in one window.
func (m MinRate) quota() int64 {
	return max(1, int64(float64(m.BytesPerSecond)*m.Window.Seconds()))
}

func (o Options) withDefaults() Options {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MinRate.BytesPerSecond <= 0 {
		o.MinRate.BytesPerSecond = DefaultMinBytesPerSecond
	}
	if o.MinRate.Window <= 0 {
		o.MinRate.Window = DefaultMinRateWindow
	}
	return o
}

// New returns a server for h with the deadlines of o, phase by phase:
// headers within ReadHeaderTimeout; the body, then the response, at
// MinRate (which also bounds a small response to MinRate.Window, the
// WriteTimeout a small answer needs, without cutting a long download);
// the next request within IdleTimeout. ReadTimeout and WriteTimeout stay
// 0: as whole-request bounds they would cut an honest volunteer's long
// upload or download.
func New(h http.Handler, o Options) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Handler:           &guard{next: h, rate: o.MinRate, metrics: o.Metrics},
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
	}
}

// Serve runs srv on ln until ctx ends, then shuts it down, letting
// requests in flight finish for up to 10 s.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	addr := ln.Addr().String()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", addr, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", addr, err)
	}
	return nil
}
