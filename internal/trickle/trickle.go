package trickle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Handler handles one trickle-up message. Returning nil marks it handled
// and queues replies, trickle-down messages to the application of the
// message's task, in the same transaction; an error leaves it to be
// handled again after a back-off. It must be idempotent: after a crash
// between Handle and the mark, the message is handled again.
type Handler interface {
	Handle(ctx context.Context, m row.MsgFromHost) (replies []Reply, err error)
}

// Reply is a trickle-down message to the application that sent a
// trickle-up: Body is its text (see protocol.TrickleDownXML).
type Reply struct {
	Variety string
	Body    string
}

// Store is what the trickle handler needs from the database.
type Store interface {
	MsgFromHostListUnhandled(ctx context.Context, p store.MsgFromHostListParams) ([]row.MsgFromHost, error)
	MsgFromHostMarkHandled(ctx context.Context, p store.MsgHandled) (store.MsgHandledOutcome, error)
}

// Config is the trickle handler's configuration; each setting has the
// rules of its flag.
type Config struct {
	// Variety, if set, is the only variety handled (--variety).
	Variety string
	// Mod and ModIndex select this replica's messages: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index).
	Mod, ModIndex int
	// Batch bounds the messages read per pass (--batch).
	Batch int
	// ExtendDeadline, if > 0, moves the message's task's report deadline
	// to at least now + ExtendDeadline (--extend-deadline).
	ExtendDeadline time.Duration
	// CreditPerCPUSecond, if > 0, grants this much credit per CPU second
	// the message reports (--credit-per-cpu-second), counting at most
	// CreditMaxCPUSeconds per message (--credit-max-cpu-seconds).
	CreditPerCPUSecond  float64
	CreditMaxCPUSeconds float64
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.ExtendDeadline < 0 {
		errs = append(errs, fmt.Errorf("--%s %s: want 0 (off) or a positive duration", FlagExtendDeadline, c.ExtendDeadline))
	}
	if !(c.CreditPerCPUSecond >= 0) {
		errs = append(errs, fmt.Errorf("--%s %v: want 0 (off) or more", FlagCreditPerCPUSecond, c.CreditPerCPUSecond))
	}
	if c.CreditPerCPUSecond > 0 && !(c.CreditMaxCPUSeconds > 0) {
		errs = append(errs, fmt.Errorf("--%s %v: want a positive number of seconds (the most CPU time one message is credited for)",
			FlagCreditMaxCPUSeconds, c.CreditMaxCPUSeconds))
	}
	if len(c.Variety) > 254 {
		errs = append(errs, fmt.Errorf("--%s: want at most 254 bytes", FlagVariety))
	}
	return errors.Join(errs...)
}

// Deps are the trickle handler's collaborators.
type Deps struct {
	Store Store
	// Handler is the project's code; nil marks messages handled with only
	// the built-in options' effects.
	Handler Handler
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is the trickle handler. Its RunOnce must not be called
// concurrently.
type Service struct {
	cfg        Config
	st         Store
	h          Handler
	log        *slog.Logger
	m          *Metrics
	now        func() time.Time
	retry      map[int64]*retryState
	after      int64 // the scan goes on after this id
	enumerated int
	// lastSent is the time of the last reply made: the client names a
	// trickle-down's file in the task's slot directory by its time, so two
	// replies to one task must not share one.
	lastSent int64
}

// retryState is a failing message's place in its back-off.
type retryState struct {
	failures int
	next     time.Time
}

// The retry schedule of a message whose handler failed.
const (
	RetryMin = 10 * time.Second
	RetryMax = time.Hour
)

// New returns a trickle handler.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, st: deps.Store, h: deps.Handler, log: deps.Log, m: deps.Metrics, now: deps.Now,
		retry: map[int64]*retryState{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m == nil {
		s.m = NewMetrics(prometheus.NewRegistry())
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// RunOnce handles up to Batch unhandled messages after the last one seen,
// and returns how many it tried. Only a failure to read the queue is an
// error: a failing message is counted, logged and retried later.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	msgs, err := s.st.MsgFromHostListUnhandled(ctx, store.MsgFromHostListParams{Variety: s.cfg.Variety,
		Mod: s.cfg.Mod, ModIndex: s.cfg.ModIndex, AfterID: s.after, Limit: s.cfg.Batch})
	if err != nil {
		return 0, fmt.Errorf("trickle handler: %w", err)
	}
	s.enumerated += len(msgs)
	if len(msgs) < s.cfg.Batch {
		s.forgetGone(s.after, msgs)
		s.after = 0 // the end of the queue: start again from its head
	} else {
		s.after = msgs[len(msgs)-1].ID
	}
	tried, failed := 0, 0
	var firstErr error
	for _, m := range msgs {
		if r := s.retry[m.ID]; r != nil && s.now().Before(r.next) {
			continue
		}
		tried++
		if err := s.handle(ctx, m); err != nil {
			failed++
			firstErr = cmpOr(firstErr, err)
		}
	}
	s.m.backingOff.Set(float64(len(s.retry)))
	if failed > 0 {
		s.log.Warn("trickle messages failed; they stay unhandled and are retried", "failed", failed,
			"backing_off", len(s.retry), "error", firstErr)
	}
	return tried, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// forgetGone drops the back-off of messages no longer in the queue
// (handled by another replica meanwhile): msgs, a page that reached the
// queue's end, holds every unhandled message after from.
func (s *Service) forgetGone(from int64, msgs []row.MsgFromHost) {
	present := make(map[int64]bool, len(msgs))
	for _, m := range msgs {
		present[m.ID] = true
	}
	for id := range s.retry {
		if id > from && !present[id] {
			delete(s.retry, id)
		}
	}
}

// handle runs the handler on m, then marks it handled with its effects.
func (s *Service) handle(ctx context.Context, m row.MsgFromHost) error {
	var replies []Reply
	if s.h != nil {
		var err error
		replies, err = s.h.Handle(ctx, m)
		if err != nil {
			kind := failHandler
			if errors.Is(err, context.DeadlineExceeded) {
				kind = failTimeout
			}
			return s.failed(m, kind, fmt.Errorf("trickle message %d: %w", m.ID, err))
		}
	}
	now := s.now()
	p := store.MsgHandled{ID: m.ID, Now: now.Unix(), ExtendDeadline: int64(s.cfg.ExtendDeadline / time.Second)}
	if s.cfg.CreditPerCPUSecond > 0 {
		cpu := min(reportedCPU(m.XML), s.cfg.CreditMaxCPUSeconds)
		p.Credit = cpu * s.cfg.CreditPerCPUSecond
	}
	for _, r := range replies {
		s.lastSent = max(now.Unix(), s.lastSent+1)
		xml, err := protocol.TrickleDownXML(m.ResultName, s.lastSent, r.Body)
		if err != nil {
			return s.failed(m, failHandler, fmt.Errorf("trickle message %d: reply: %w", m.ID, err))
		}
		p.Replies = append(p.Replies, row.MsgToHost{HostID: m.HostID, Variety: r.Variety, XML: xml})
	}
	out, err := s.st.MsgFromHostMarkHandled(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		delete(s.retry, m.ID)
		s.m.messages.WithLabelValues(outcomeConflict).Inc()
		s.log.Debug("trickle message handled by another replica", "msg_id", m.ID)
		return nil
	}
	if err != nil {
		return s.failed(m, failDB, err)
	}
	delete(s.retry, m.ID)
	s.m.messages.WithLabelValues(outcomeHandled).Inc()
	s.m.replies.Add(float64(len(p.Replies)))
	if out.Extended {
		s.m.extended.Inc()
	}
	if out.Credited {
		s.m.credit.Add(p.Credit)
	}
	s.log.Debug("trickle message handled", "msg_id", m.ID, "host_id", m.HostID, "variety", m.Variety,
		"result_name", m.ResultName, "replies", len(p.Replies), "deadline_extended", out.Extended, "credit", p.Credit)
	return nil
}

// failed records a failure for m's back-off and returns err.
func (s *Service) failed(m row.MsgFromHost, kind string, err error) error {
	s.m.errors.WithLabelValues(kind).Inc()
	r := s.retry[m.ID]
	if r == nil {
		r = &retryState{}
		s.retry[m.ID] = r
	}
	r.failures++
	delay := RetryMax
	if shift := r.failures - 1; shift < 16 {
		delay = min(RetryMin<<shift, RetryMax)
	}
	r.next = s.now().Add(delay)
	s.log.Debug("trickle message failed", "msg_id", m.ID, "kind", kind, "failures", r.failures, "retry_in", delay, "error", err)
	return err
}

// reportedCPU is the CPU time a message reports: its first <cpu_time>, else
// its first <runtime> (BOINC's trickle handlers read these), 0 if neither
// is a non-negative number.
func reportedCPU(xml string) float64 {
	for _, tag := range []string{"cpu_time", "runtime"} {
		open, end := "<"+tag+">", "</"+tag+">"
		i := strings.Index(xml, open)
		if i < 0 {
			continue
		}
		rest := xml[i+len(open):]
		j := strings.Index(rest, end)
		if j < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[:j]), 64)
		if err != nil || !(v >= 0) || v > 1e12 {
			return 0
		}
		return v
	}
	return 0
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}
