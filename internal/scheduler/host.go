package scheduler

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Why a request was given a host id other than the one it sent (log
// values).
const (
	hostNew      = "new"         // the client had none and no earlier host matches
	hostReattach = "reattach"    // no id, but the user has a host with the client's cpid
	hostUnknown  = "unknown_id"  // the id names no host
	hostForeign  = "foreign_id"  // the id names another user's host
	hostStaleSeq = "stale_seqno" // rpc_seqno went backwards: a copied or restored client
	hostSame     = "same"        // the host row the client named
)

// recordHost decides which host row the request is from and records what
// the client says about itself, following BOINC's rules:
//   - an id of the user's own host, with an rpc_seqno not below the one
//     stored, is that host;
//   - a lower rpc_seqno means two clients share one identity (a data
//     directory copied to another computer, or restored from a backup):
//     the request gets a new host, so the two stop reporting over each
//     other's work;
//   - an id of another user's host gets a new host (the id is not proof of
//     anything; the authenticator is);
//   - no id (or one that names no host) with the cpid of one of the user's
//     hosts is that host coming back after a detach: it gets its old id
//     rather than a duplicate row.
//
// A client that attached anew has lost the tasks its host held: when it
// comes back by cpid listing and reporting no tasks, or names another user's host while
// the user has a host with its cpid (replaced now by a new row), that
// host's tasks in progress become CLIENT_DETACHED and their jobs are woken,
// so they are sent elsewhere at once instead of at their deadlines.
//
// Whenever the host differs from the id sent, the reply carries <hostid>;
// the client then restarts its rpc_seqno at 0, which is what is stored. The
// id is not sent otherwise: a client that already has one takes a new id as
// a sign it was cloned and makes itself a new cpid.
//
// The host row's update is written with the request's reports and sends
// (commitRound); only a new host is inserted at once, for its id.
func (s *Service) recordHost(ctx context.Context, x *rpc, ip string, h row.Host, found bool) error {
	req := x.req
	why := hostNew
	if req.HostID > 0 {
		switch {
		case !found:
			why = hostUnknown
		case h.UserID != x.user.ID:
			why = hostForeign
		case req.RPCSeqno < h.RPCSeqno:
			why = hostStaleSeq
		default:
			why = hostSame
			x.host = h
		}
	}
	if why == hostNew || why == hostUnknown {
		h, ok, err := s.hostByCPID(ctx, x)
		if err != nil {
			return err
		}
		if ok {
			why = hostReattach
			x.host = h
		}
	}

	switch why {
	case hostSame:
		old := x.host
		x.host = hostFromRequest(x.host, req, ip, x.now, x.user.EmailAddr)
		x.hostWrite = &store.SchedHost{Host: x.host, Info: hostInfoChanged(old, x.host)}
	case hostReattach:
		old := x.host
		x.host = hostFromRequest(x.host, req, ip, x.now, x.user.EmailAddr)
		x.host.RPCSeqno = 0
		x.reply.HostID = x.host.ID
		x.hostWrite = &store.SchedHost{Host: x.host, Info: hostInfoChanged(old, x.host)}
	default:
		// Naming another user's host, the client replaces the user's own
		// host with its cpid, if there is one.
		var replaced int64
		if why == hostForeign {
			old, ok, err := s.hostByCPID(ctx, x)
			if err != nil {
				return err
			}
			if ok {
				replaced = old.ID
			}
		}
		h := hostFromRequest(row.Host{CreateTime: x.now, UserID: x.user.ID}, req, ip, x.now, x.user.EmailAddr)
		h.RPCSeqno = 0
		id, err := s.st.HostInsert(ctx, h)
		if err != nil {
			return fmt.Errorf("%w: %w", errUnavailable, err)
		}
		h.ID = id
		x.host = h
		// Written again with the request's reports: a new host's reports
		// (tasks its user's other host was sent) move its counters.
		x.hostWrite = &store.SchedHost{Host: h}
		x.reply.HostID = id
		s.log.Debug("new host", "host_id", id, "user_id", x.user.ID, "reason", why, "sent_host_id", req.HostID,
			"rpc_seqno", req.RPCSeqno)
		if replaced != 0 {
			s.detach(ctx, x, replaced)
		}
		return nil
	}
	if why == hostReattach {
		s.log.Debug("host came back without its id", "host_id", x.host.ID, "user_id", x.user.ID)
		// A client still listing or reporting tasks has not lost them.
		if len(req.OtherResults) == 0 && len(req.Results) == 0 {
			s.detach(ctx, x, x.host.ID)
		}
	}
	return nil
}

// detach marks the tasks in progress on host hostID CLIENT_DETACHED. A
// failure is logged, not returned: the tasks then simply time out.
func (s *Service) detach(ctx context.Context, x *rpc, hostID int64) {
	n, err := s.st.ResultDetachHost(ctx, hostID, x.now)
	s.m.detached.Add(float64(n))
	if err != nil {
		s.log.Error("mark results of a detached client", "host_id", hostID, "user_id", x.user.ID, "error", err)
		return
	}
	if n > 0 {
		s.log.Info("client attached anew: its results in progress marked detached", "host_id", hostID,
			"user_id", x.user.ID, "results", n)
	}
}

// storedHostCPID is what the host row keeps of the host_cpid a client
// sends: as BOINC keeps it, the md5 of the cpid and the owner's e-mail
// address, so that one volunteer cannot claim another's host by sending
// its cpid, and the statistics export's host_cpid is BOINC's. "" stays "".
func storedHostCPID(cpid, email string) string {
	if cpid == "" {
		return ""
	}
	sum := md5.Sum([]byte(cpid + email))
	return hex.EncodeToString(sum[:])
}

// hostByCPID finds the user's host with the cpid the request's host_info
// names, if it names one (stored as BOINC stores it, so a host imported
// from a BOINC project is found too).
func (s *Service) hostByCPID(ctx context.Context, x *rpc) (row.Host, bool, error) {
	cpid := storedHostCPID(text(x.req.HostInfo.HostCPID), x.user.EmailAddr)
	if cpid == "" {
		return row.Host{}, false, nil
	}
	h, err := s.st.HostGetByCPID(ctx, x.user.ID, cpid)
	if errors.Is(err, store.ErrNotFound) {
		return row.Host{}, false, nil
	}
	if err != nil {
		return row.Host{}, false, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return h, true, nil
}

// hostInfoChanged reports whether the request changed any host_info column
// of the row: most requests change only rpc_seqno and rpc_time, and the
// update then writes only those.
func hostInfoChanged(a, b row.Host) bool {
	a.RPCSeqno, a.RPCTime, a.LastIPAddr = b.RPCSeqno, b.RPCTime, b.LastIPAddr
	return a != b
}
