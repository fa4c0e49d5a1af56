package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/store"
)

// Options tune the handler. Zero values take the defaults.
type Options struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	// MaxAge is how long one collected Status is served again before the
	// database is asked anew (default 30 s): the counts scan the result
	// and workunit tables (about 12 s for a million results on a busy
	// 2-core machine), and every viewer's page refreshes itself.
	MaxAge time.Duration
	// Refresh is the HTML page's meta refresh interval (default 60 s;
	// negative: none).
	Refresh time.Duration
	// ProbeTimeout bounds each /healthz and /metrics request to a daemon
	// (default 2 s).
	ProbeTimeout time.Duration
	// Client makes the probes; default a client with no keep-alives, so
	// probing leaves no idle connections to daemons.
	Client *http.Client
	// Title heads the page; default "Project status".
	Title string
	// Logger gets one line per failed collection; default slog.Default().
	Logger *slog.Logger
}

// Handler serves the status page at "/" and its JSON at "/status.json".
type Handler struct {
	st      *store.Store
	targets []Target
	opts    Options
	mux     *http.ServeMux

	mu   sync.Mutex // held while collecting, so viewers share one collection
	last Status
	at   time.Time
}

// New returns the status page handler for st's project and the daemons in
// targets (see Targets).
func New(st *store.Store, targets []Target, opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = 30 * time.Second
	}
	if opts.Refresh == 0 {
		opts.Refresh = 60 * time.Second
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = 2 * time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	if opts.Title == "" {
		opts.Title = "Project status"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{st: st, targets: targets, opts: opts, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.serveHTML)
	h.mux.HandleFunc("GET /status.json", h.serveJSON)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Status returns the current status, collected at most MaxAge ago.
func (h *Handler) Status(ctx context.Context) (Status, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.opts.Now()
	if !h.at.IsZero() && now.Sub(h.at) < h.opts.MaxAge && now.Sub(h.at) >= 0 {
		return h.last, nil
	}
	s, err := Collect(ctx, h.st, h.targets, h.opts.Client, h.opts.ProbeTimeout, now)
	if err != nil {
		h.opts.Logger.Error("collect status", "error", err)
		return s, err
	}
	h.last, h.at = s, now
	return s, nil
}

func (h *Handler) serveJSON(w http.ResponseWriter, r *http.Request) {
	s, err := h.Status(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
}

func (h *Handler) serveHTML(w http.ResponseWriter, r *http.Request) {
	s, err := h.Status(r.Context())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	data := pageData{Title: h.opts.Title, Refresh: int(h.opts.Refresh / time.Second), S: s}
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		data.Error = fmt.Sprintf("cannot read the project database: %v", err)
	}
	if err := page.Execute(w, data); err != nil {
		h.opts.Logger.Debug("write status page", "error", err)
	}
}
