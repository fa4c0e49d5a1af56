package dbpurge

import (
	"context"

	"github.com/taskserver/taskserver/internal/store"
)

// purgeTrickles deletes up to a batch each of the trickle-up messages
// handled and the trickle-down messages delivered more than
// TrickleRetention ago: they are not archived (a trickle handler has
// recorded what it needed). Messages not yet handled are kept however old.
// Only replica 0 purges them, so replicas do not contend for the same
// rows.
func (s *Service) purgeTrickles(ctx context.Context) error {
	if s.cfg.TrickleRetention <= 0 || s.cfg.ModIndex != 0 {
		return nil
	}
	up, down, err := s.st.MsgPurge(ctx, s.now().Add(-s.cfg.TrickleRetention).Unix(), s.cfg.Batch)
	s.m.deleted.WithLabelValues("msg_from_host").Add(float64(up))
	s.m.deleted.WithLabelValues("msg_to_host").Add(float64(down))
	if up+down > 0 {
		s.log.Info("purged trickle messages", "msg_from_host", up, "msg_to_host", down)
	}
	return err
}

// purgeThroughput deletes up to a batch of the status page's per-minute
// throughput rows older than store.ThroughputRetention (the page reads the
// last day). Only replica 0 does it, like the trickle messages.
func (s *Service) purgeThroughput(ctx context.Context) error {
	if s.cfg.ModIndex != 0 {
		return nil
	}
	n, err := s.st.ThroughputPurge(ctx, s.now().Unix()-store.ThroughputRetention, s.cfg.Batch)
	s.m.deleted.WithLabelValues("throughput").Add(float64(n))
	return err
}

// foldCountsRounds bounds the folds of one pass, so a pass that follows a
// long stop still ends soon; the next pass goes on.
const foldCountsRounds = 100

// foldCounts folds the rows the status page's count tables gained since
// the last pass (store.CountsFold), until a fold finds less than a full
// batch. Writers only append to those tables; without the folds a reading
// would sum every row written since the upgrade. Only replica 0 folds, so
// replicas do not wait for each other's locks on the same oldest rows.
func (s *Service) foldCounts(ctx context.Context) error {
	if s.cfg.ModIndex != 0 {
		return nil
	}
	for range foldCountsRounds {
		n, err := s.st.CountsFold(ctx, store.CountsFoldLimit)
		s.m.deleted.WithLabelValues("count").Add(float64(n))
		if err != nil || n < store.CountsFoldLimit {
			return err
		}
	}
	return nil
}
