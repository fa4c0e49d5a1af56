package scheduler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/taskserver/taskserver/internal/protocol"
)

// How long a client whose request was refused waits before the next:
// a request cut off in transit may well go through at once, one too large
// will be as large next time.
const (
	malformedDelay = 10 * time.Minute
	tooLargeDelay  = 6 * time.Hour
)

// Messages for the volunteer's event log: what happened and what to do,
// without the server's error text (which goes to the server's log).
const (
	malformedText = "The project's scheduler could not read the request from this computer (it was cut off in " +
		"transit or is not a BOINC scheduler request). BOINC will retry; if this message keeps coming, " +
		"update BOINC, or remove and add this project."
	tooLargeText = "The request from this computer was larger than this project's scheduler accepts (%s), so " +
		"nothing in it was recorded. To report fewer tasks at a time, set the option max_tasks_reported to 100 in " +
		"cc_config.xml and restart BOINC, or tell the project's administrators."
)

// headBytes is how much of a request is kept for the log of a refused one:
// the client writes its host id in its first few lines.
const headBytes = 4096

// headRecorder passes a request body through, keeping its first headBytes.
type headRecorder struct {
	r    io.Reader
	head []byte
}

func (h *headRecorder) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := headBytes - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(n, room)]...)
	}
	return n, err
}

// refuse answers a request that could not be parsed, as BOINC's scheduler
// does: HTTP 200 with a scheduler reply the client reads, a message for
// the event log and a request_delay, so that the client backs off instead of
// retrying at once, and the volunteer learns what to do. The server's log
// gets the detail, the peer, and the host id if the head names one. It
// returns the request's outcome.
func (s *Service) refuse(w http.ResponseWriter, r *http.Request, head *headRecorder, err error) string {
	outcome, text, delay := outcomeBadRequest, malformedText, malformedDelay
	if errors.Is(err, protocol.ErrTooLarge) {
		outcome, delay = outcomeTooLarge, tooLargeDelay
		text = fmt.Sprintf(tooLargeText, size(s.opts.MaxBodyBytes))
	}
	log := s.log.Warn
	if !errors.Is(err, protocol.ErrTooLarge) && !errors.Is(err, protocol.ErrTooDeep) && !errors.Is(err, protocol.ErrMalformed) {
		log = s.log.Info // the body could not be read: the client went away
	}
	log("scheduler request refused", "reason", outcome, "error", err, "remote_addr", remoteIP(r),
		"host_id", protocol.HeadHostID(head.head), "content_length", r.ContentLength)
	reply := &protocol.SchedulerReply{ProjectName: s.opts.ProjectName, RequestDelay: delay.Seconds(),
		Messages: []protocol.Message{{Priority: "notice", Text: text}}}
	var buf bytes.Buffer
	if err := protocol.WriteSchedulerReply(&buf, reply); err != nil {
		http.Error(w, "the scheduler could not read the request", http.StatusBadRequest)
		return outcome
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
	return outcome
}

// size writes n bytes for people: "8 KB", "129 MB".
func size(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KB", (n+1023)>>10)
	}
	return fmt.Sprintf("%d MB", (n+(1<<20)-1)>>20)
}
