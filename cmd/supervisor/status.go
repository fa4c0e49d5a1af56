package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/store"
)

// statusHandler serves the project's status page on the supervisor's
// listener once the database is reachable. The supervisor must start the
// daemons whether or not the database answers, so the store is opened in
// the background (store.Open retries until ctx ends) and the page answers
// 503 until then.
type statusHandler struct {
	h atomic.Pointer[http.Handler]
}

// newStatusHandler returns the page for the configuration body, or nil
// when the configuration names no database.
func newStatusHandler(ctx context.Context, body []byte, log *slog.Logger) (*statusHandler, error) {
	values, err := config.Parse(body)
	if err != nil {
		return nil, err
	}
	dsn := values[config.FlagDBDSN]
	if dsn == "" {
		return nil, nil
	}
	targets, err := statuspage.Targets(body)
	if err != nil {
		return nil, err
	}
	s := &statusHandler{}
	go func() {
		// SyncReads: the page counts what every node committed, not what
		// this one has applied so far.
		st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2, SyncReads: true})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("status page: database unavailable", "error", err)
			}
			return
		}
		context.AfterFunc(ctx, func() { _ = st.Close() })
		var h http.Handler = statuspage.New(st, targets, statuspage.Options{})
		s.h.Store(&h)
	}()
	return s, nil
}

func (s *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "status page: the project database is not reachable yet", http.StatusServiceUnavailable)
}
