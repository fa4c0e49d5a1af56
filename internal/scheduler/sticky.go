package scheduler

import (
	"context"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// A job's rsc_disk_bound is all the disk it may use, its input files
// included (BOINC's meaning). A sticky input the host already holds is
// already out of the free disk it reports (d_free), so counting it again
// would refuse jobs that fit: the scheduler counts what the job adds.

// heldSticky is the set of sticky files the host lists as present, or nil
// when it lists none (then jobs' documents are not read for the disk check).
func heldSticky(req *protocol.SchedulerRequest) map[string]bool {
	var held map[string]bool
	for _, f := range req.HostFiles {
		if f.Status != protocol.FilePresent {
			continue
		}
		if held == nil {
			held = map[string]bool{}
		}
		held[f.Name] = true
	}
	return held
}

// stickyInputs returns the sticky inputs of the job of e when the disk
// check may credit them: the host lists held files, reports its free disk,
// and the job has a disk bound. Without its document a job has none: it
// counts whole, never less than it may need.
func (s *Service) stickyInputs(ctx context.Context, w *walk, e shmcache.Entry) []jobxml.InputFile {
	if w.held == nil || !finitePositive(e.RscDiskBound) || w.q.disk <= 0 {
		return nil
	}
	wus, err := s.st.WorkunitListByIDs(ctx, []int64{e.WorkunitID})
	if err != nil || len(wus) != 1 {
		return nil
	}
	in, err := jobxml.ParseWorkunit(wus[0].XMLDoc)
	if err != nil {
		return nil
	}
	var sticky []jobxml.InputFile
	for _, f := range in.Inputs {
		if f.Sticky {
			sticky = append(sticky, f)
		}
	}
	return sticky
}

// diskNeed is the disk a job with disk bound bound and the sticky inputs
// sticky adds on the host: the bound less the inputs that are there
// already (held by the host, or sent earlier in this reply: in any of
// held).
func diskNeed(bound float64, sticky []jobxml.InputFile, held ...map[string]bool) float64 {
	if !finitePositive(bound) {
		return bound
	}
	need := bound
	for _, f := range sticky {
		for _, h := range held {
			if h[f.Name] {
				need -= f.Nbytes
				break
			}
		}
	}
	// 0 would read as "no bound": the job still needs some room.
	return max(need, 1)
}

// hold records that sticky is on the host (or on its way) in held.
func hold(held map[string]bool, sticky []jobxml.InputFile) {
	for _, f := range sticky {
		held[f.Name] = true
	}
}

// readSentSticky reads the sticky inputs of the jobs already sent in this
// reply (into w.held) and of those claimed in this round (into roundHeld)
// that were not read: a job that needs the disk credit is credited for
// the sticky files on their way to the host too. They were counted whole,
// which is what a job that brings its sticky file needs.
func (s *Service) readSentSticky(ctx context.Context, w *walk, round []candidate, roundHeld map[string]bool) {
	for _, e := range w.unread {
		hold(w.held, s.stickyInputs(ctx, w, e))
	}
	w.unread = nil
	for i := range round {
		if !round[i].stickyRead {
			round[i].sticky, round[i].stickyRead = s.stickyInputs(ctx, w, round[i].e), true
			hold(roundHeld, round[i].sticky)
		}
	}
}
