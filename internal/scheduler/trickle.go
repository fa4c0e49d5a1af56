package scheduler

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// Bounds of the trickle-up messages one request may store. The client
// sends every message it holds until a reply acks them, and an ack deletes
// them all, so a request past a bound is refused whole (nothing stored,
// no ack) and says why; the parser's bound on the request (besides its
// reports) holds their bytes together.
const (
	// MaxTrickleUps is the most messages stored from one request: an app
	// sending one an hour fills it after six weeks offline.
	MaxTrickleUps = 1000
	// MaxTrickleUpBytes bounds one message, BOINC's own bound
	// (MSG_FROM_HOST_BLOB_SIZE).
	MaxTrickleUpBytes = 64 << 10
	// maxNameBytes bounds a message's task name and variety, as their
	// columns do.
	maxNameBytes = 254
	// maxTrickleDowns bounds the trickle-down messages put in one reply;
	// the rest go with the next.
	maxTrickleDowns = 100
)

// Outcomes of trickle-up messages (label values of trickle_ups_total).
const (
	trickleStored    = "stored"
	trickleDuplicate = "duplicate"
	trickleRefused   = "refused"
	trickleError     = "error"
)

// storeTrickleUps stores the request's trickle-up messages (msg_from_host),
// each once however often the client sends it, and acks them
// (<message_ack/>) only once all are stored: the client then deletes them
// all. A request past the bounds, or a database failure, stores nothing
// and acks nothing; the client sends them again.
func (s *Service) storeTrickleUps(ctx context.Context, x *rpc) {
	msgs := x.req.MsgsFromHost
	if len(msgs) == 0 {
		return
	}
	if why := trickleUpsRefused(msgs); why != "" {
		s.m.trickleUps.WithLabelValues(trickleRefused).Add(float64(len(msgs)))
		s.log.Warn("trickle-up messages refused", "host_id", x.host.ID, "messages", len(msgs), "reason", why)
		x.reply.Messages = append(x.reply.Messages, protocol.Message{Priority: "low",
			Text: "Trickle-up messages not accepted: " + why})
		return
	}
	rows := make([]row.MsgFromHost, len(msgs))
	for i, m := range msgs {
		rows[i] = row.MsgFromHost{CreateTime: x.now, HostID: x.host.ID, Variety: m.Variety, ResultName: m.ResultName,
			MD5: m.MD5(), XML: m.XML}
	}
	n, err := s.st.MsgFromHostInsert(ctx, rows)
	if err != nil {
		s.m.trickleUps.WithLabelValues(trickleError).Add(float64(len(msgs)))
		s.log.Error("trickle-up messages not stored; not acked, the client sends them again", "host_id", x.host.ID,
			"messages", len(msgs), "error", err)
		return
	}
	n = min(max(n, 0), int64(len(msgs)))
	s.m.trickleUps.WithLabelValues(trickleStored).Add(float64(n))
	s.m.trickleUps.WithLabelValues(trickleDuplicate).Add(float64(int64(len(msgs)) - n))
	x.reply.MessageAck = &protocol.Empty{}
}

// trickleUpsRefused says why msgs may not be stored, or "".
func trickleUpsRefused(msgs []protocol.MsgFromHost) string {
	if len(msgs) > MaxTrickleUps {
		return fmt.Sprintf("%d messages in one request, at most %d are accepted", len(msgs), MaxTrickleUps)
	}
	for _, m := range msgs {
		switch {
		case len(m.XML) > MaxTrickleUpBytes:
			return fmt.Sprintf("a message of task %q has %d bytes, at most %d are accepted", m.ResultName, len(m.XML), MaxTrickleUpBytes)
		case len(m.ResultName) > maxNameBytes || len(m.Variety) > maxNameBytes:
			return fmt.Sprintf("a message's task name or variety is longer than %d bytes", maxNameBytes)
		}
	}
	return ""
}

// deliverTrickleDowns puts the host's queued trickle-down messages in the
// reply, marked delivered as they are read: each is sent once. As in BOINC,
// a reply lost on its way loses its messages with it. A host the account's
// read found with none waiting is not read again: one queued since waits
// for the next request, as one queued just after this reply would.
func (s *Service) deliverTrickleDowns(ctx context.Context, x *rpc) {
	if !s.opts.TrickleDown || x.host.ID == 0 || x.host.ID == x.noTrickleDownsOf {
		return
	}
	msgs, err := s.st.MsgToHostTake(ctx, x.host.ID, maxTrickleDowns)
	if err != nil {
		s.log.Error("trickle-down messages not read; they wait for the next request", "host_id", x.host.ID, "error", err)
		return
	}
	for _, m := range msgs {
		x.reply.Raw = append(x.reply.Raw, m.XML)
	}
	s.m.trickleDowns.Add(float64(len(msgs)))
}
