package dbpurge

import "context"

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
