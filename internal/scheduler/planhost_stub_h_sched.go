package scheduler

import (
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// planHost is a stand-in for h-planclass's: the host as plan classes test
// it. The merge of h-planclass replaces this file.
func planHost(h row.Host, req *protocol.SchedulerRequest) planclass.Host {
	ph := planclass.Host{PFpops: h.PFpops, NCPUs: h.PNCPUs, Coprocs: map[string]float64{}}
	for _, c := range req.Coprocs.Resources() {
		ph.Coprocs[c.Type] = float64(c.Count)
	}
	return ph
}
