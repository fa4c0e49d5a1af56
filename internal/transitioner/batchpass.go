package transitioner

import (
	"context"
	"errors"
	"math"

	"github.com/taskserver/taskserver/internal/store"
)

// batchPass walks every batch in progress once: a batch whose jobs are all
// assimilated is marked done, and a batch down to its last few unfinished
// jobs (at most max(1, TailFraction × its jobs)) has each of its stragglers
// given one extra instance that only fast, reliable hosts may get (tail
// acceleration; package transition gives that instance its send flag and
// priority). It returns how many batches and jobs it changed.
//
// Each change is one conditional update, so a pass stopped half-way, or a
// second replica running it by mistake, leaves nothing half-done.
func (s *Service) batchPass(ctx context.Context, now int64) (int, error) {
	var done, copies int
	var errs []error
	after := int64(0)
	for {
		page, err := s.st.BatchListProgress(ctx, store.BatchListProgressParams{AfterID: after, Limit: batchPage})
		if err != nil {
			errs = append(errs, err)
			break
		}
		for _, b := range page {
			after = b.ID
			switch {
			case b.NJobs == 0:
				// Nothing to finish or to speed up.
			case b.Unfinished == 0 && b.Assimilated == b.NJobs:
				ok, err := s.markBatchDone(ctx, b.ID, now)
				if err != nil {
					errs = append(errs, err)
				} else if ok {
					done++
				}
			case s.inTail(b):
				n, err := s.accelerate(ctx, b, now)
				copies += n
				if err != nil {
					errs = append(errs, err)
				}
			}
		}
		if len(page) < batchPage || ctx.Err() != nil {
			break
		}
	}
	if done > 0 || copies > 0 {
		s.log.Info("batch pass", "batches_completed", done, "tail_copies", copies)
	}
	return done + copies, errors.Join(errs...)
}

// inTail reports whether batch b is down to the tail that acceleration
// speeds up.
func (s *Service) inTail(b store.BatchProgress) bool {
	if s.opts.TailFraction <= 0 || b.Unfinished == 0 {
		return false
	}
	return float64(b.Unfinished) <= math.Max(1, s.opts.TailFraction*float64(b.NJobs))
}

// markBatchDone marks batch id done; false when it was not (someone got
// there first, or a job changed since it was counted).
func (s *Service) markBatchDone(ctx context.Context, id, now int64) (bool, error) {
	err := s.st.BatchMarkDone(ctx, id, now)
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.m.batchesDone.Inc()
	s.log.Debug("batch done", "batch_id", id)
	return true, nil
}

// accelerate gives each qualifying unfinished job of batch b one more
// instance and returns how many it gave.
func (s *Service) accelerate(ctx context.Context, b store.BatchProgress, now int64) (int, error) {
	jobs, err := s.st.WorkunitListTail(ctx, store.WorkunitListTailParams{Batch: b.ID, Now: now,
		After: s.opts.TailAfter, Limit: b.Unfinished})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, j := range jobs {
		err := s.st.WorkunitAddTailCopy(ctx, j.ID, j.TailCopies, now)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		s.m.tailCopies.Inc()
		s.log.Debug("tail copy", "batch_id", b.ID, "workunit_id", j.ID)
	}
	return n, errors.Join(errs...)
}
