package scheduler

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
)

// jobsTodayWriteEvery is how long a scheduler keeps the jobs it sent before
// it writes their count to host_app_version. Counting each send in its own
// row update cost the database about a tenth of its whole CPU in `make
// bench` (the update, and InnoDB purging its undo afterwards: a handful of
// hot rows updated on every request); written once a second, a busy host's
// row is updated once a second, whatever its request rate. What may be lost
// is bounded by it: a scheduler killed outright forgets up to this much of
// its sends, so a host may get that many jobs over its daily quota, and
// another scheduler of the project sees them this much later.
const jobsTodayWriteEvery = time.Second

// jobsToday is a scheduler's count of the jobs it sent that host_app_version
// does not hold yet, per host and version: the daily quota is checked
// against the rows read plus these (overlay), and a group commit takes them
// now and then (take) to write with its own rows.
type jobsToday struct {
	mu sync.Mutex
	// pending are the counts not yet written, by host and then version.
	pending map[int64]map[int64]decide.HostAppVersionDelta
	// since is when the oldest of pending was counted.
	since time.Time
	// writing is set while a commit writes a snapshot of pending.
	writing bool
}

// add counts sends that went through.
func (j *jobsToday) add(deltas []decide.HostAppVersionDelta, now time.Time) {
	if len(deltas) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending == nil {
		j.pending = map[int64]map[int64]decide.HostAppVersionDelta{}
	}
	if len(j.pending) == 0 {
		j.since = now
	}
	for _, d := range deltas {
		if d.Sent == 0 {
			continue
		}
		byAV := j.pending[d.HostID]
		if byAV == nil {
			byAV = map[int64]decide.HostAppVersionDelta{}
			j.pending[d.HostID] = byAV
		}
		p, ok := byAV[d.AppVersionID]
		switch {
		case !ok || d.Day > p.Day:
			byAV[d.AppVersionID] = decide.HostAppVersionDelta{HostID: d.HostID, AppVersionID: d.AppVersionID,
				Sent: d.Sent, Day: d.Day}
		case d.Day == p.Day:
			p.Sent += d.Sent
			byAV[d.AppVersionID] = p
		}
	}
}

// take returns every pending count, in the store's lock order, when the
// oldest is due (or all is set) and no other commit is writing them; nil
// otherwise. The counts stay pending (overlay still adds them) until done
// says whether they were written.
func (j *jobsToday) take(now time.Time, all bool) []decide.HostAppVersionDelta {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.writing || len(j.pending) == 0 || (!all && now.Sub(j.since) < jobsTodayWriteEvery) {
		return nil
	}
	var out []decide.HostAppVersionDelta
	for _, byAV := range j.pending {
		for _, d := range byAV {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b decide.HostAppVersionDelta) int {
		return cmp.Or(cmp.Compare(a.HostID, b.HostID), cmp.Compare(a.AppVersionID, b.AppVersionID))
	})
	j.writing = true
	return out
}

// done ends the write of taken (a take's result): written, they leave
// pending (counts added since stay); not written, they stay pending for the
// next commit.
func (j *jobsToday) done(taken []decide.HostAppVersionDelta, written bool, now time.Time) {
	if taken == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.writing = false
	if !written {
		return
	}
	for _, t := range taken {
		byAV := j.pending[t.HostID]
		p, ok := byAV[t.AppVersionID]
		if !ok || p.Day != t.Day {
			continue
		}
		if p.Sent -= t.Sent; p.Sent <= 0 {
			delete(byAV, t.AppVersionID)
			if len(byAV) == 0 {
				delete(j.pending, t.HostID)
			}
		} else {
			byAV[t.AppVersionID] = p
		}
	}
	j.since = now
}

// overlay returns host hostID's host_app_version rows as read plus the
// jobs this scheduler sent it that the rows do not hold yet (a version
// without a row gets one).
func (j *jobsToday) overlay(hostID int64, havs []row.HostAppVersion) []row.HostAppVersion {
	j.mu.Lock()
	defer j.mu.Unlock()
	byAV := j.pending[hostID]
	if len(byAV) == 0 {
		return havs
	}
	out := slices.Clone(havs)
	seen := make(map[int64]bool, len(out))
	for i := range out {
		h := &out[i]
		seen[h.AppVersionID] = true
		p, ok := byAV[h.AppVersionID]
		switch {
		case !ok:
		case p.Day == h.Day:
			h.NJobsToday += p.Sent
		case p.Day > h.Day:
			h.NJobsToday, h.Day = p.Sent, p.Day
		}
	}
	for av, p := range byAV {
		if !seen[av] {
			out = append(out, row.HostAppVersion{HostID: hostID, AppVersionID: av, NJobsToday: p.Sent, Day: p.Day})
		}
	}
	return out
}
