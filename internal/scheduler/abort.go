package scheduler

import (
	"context"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Kinds of abort (label values of results_aborted_total).
const (
	abortNow          = "abort"
	abortIfNotStarted = "if_not_started"
)

// abortUnneeded tells the host to drop tasks it lists in <other_results>
// that no longer earn anything, so its CPU goes to work the project needs:
//   - result_abort for a task the server does not know, that is not this
//     user's, or that is over without the host having finished it (timed
//     out as NO_REPLY, cancelled as DIDNT_NEED): its result would be
//     refused anyway. A task of another host of the same user is the
//     host's own: a client restored from a backup has a new host id, and
//     its reports are accepted (prepareReport);
//   - result_abort_if_not_started for a task still in progress here whose
//     job is already done (a canonical result or an error mask): if it is
//     running the host may as well finish it, since a late result can
//     still be granted credit, but one not started is wasted work.
//
// A task reported in this request is skipped: its report was just handled
// and its ack says everything.
func (s *Service) abortUnneeded(ctx context.Context, x *rpc) {
	if len(x.req.OtherResults) == 0 || x.dbErr {
		return
	}
	seen := map[string]bool{}
	var names []string
	var done []string // in progress here, job done: known from the held list
	for _, o := range x.req.OtherResults {
		name := strings.TrimSpace(o.Name)
		// A name no result can have is ignored, not echoed: it may not
		// even be valid in the reply's XML.
		if name == "" || !resultName(name) || seen[name] || x.reported[name] {
			continue
		}
		seen[name] = true
		if hr, ok := x.held[name]; ok {
			if hr.JobDone {
				done = append(done, name)
			}
			continue
		}
		if len(names) == store.MaxResultNames {
			continue // the rest wait for a later request
		}
		names = append(names, name)
	}
	for _, name := range done {
		x.reply.ResultAbortsINS = append(x.reply.ResultAbortsINS, protocol.NameElement{Name: name})
		s.m.resultsAborted.WithLabelValues(abortIfNotStarted).Inc()
	}
	if len(names) == 0 {
		return
	}
	rows, err := s.st.ResultListByNames(ctx, names)
	if err != nil {
		s.log.Error("look up listed results", "host_id", x.host.ID, "error", err)
		x.dbErr = true
		return
	}
	byName := make(map[string]store.ResultByName, len(rows))
	for _, r := range rows {
		byName[r.Name] = r
	}
	for _, name := range names {
		r, ok := byName[name]
		kind := abortKind(r, ok, x.host.ID, x.user.ID)
		switch kind {
		case abortNow:
			x.reply.ResultAborts = append(x.reply.ResultAborts, protocol.NameElement{Name: name})
		case abortIfNotStarted:
			x.reply.ResultAbortsINS = append(x.reply.ResultAbortsINS, protocol.NameElement{Name: name})
		default:
			continue
		}
		s.m.resultsAborted.WithLabelValues(kind).Inc()
		s.log.Debug("abort listed result", "result", name, "host_id", x.host.ID, "kind", kind)
	}
}

// abortKind decides a task the host lists and does not hold in progress
// here, r being its row if found: abortNow, abortIfNotStarted, or "" to
// leave it to the host.
func abortKind(r store.ResultByName, found bool, hostID, userID int64) string {
	switch {
	case !found || !usersHost(r.HostID, r.UserID, hostID, userID):
		return abortNow
	case r.ServerState == state.ServerInProgress:
		if r.CanonicalResultID != 0 || r.ErrorMask != 0 {
			return abortIfNotStarted
		}
		return ""
	case r.ServerState == state.ServerOver:
		switch r.Outcome {
		case state.OutcomeSuccess, state.OutcomeClientError, state.OutcomeValidateError:
			// The host finished it and it was recorded: it only waits to
			// be reported again or acked.
			return ""
		}
	}
	return abortNow
}
