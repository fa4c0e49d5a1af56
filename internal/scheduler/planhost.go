package scheduler

import (
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// planHost is the host as plan classes test it: the row as this request
// updated it, and what only the request tells (CPU features, the client's
// version, the coprocessors).
func planHost(h row.Host, req *protocol.SchedulerRequest) planclass.Host {
	return planclass.Host{OSName: h.OSName, OSVersion: h.OSVersion, PVendor: h.PVendor, PModel: h.PModel,
		PFeatures: req.HostInfo.PFeatures, NCPUs: max(h.PNCPUs, 1), PFpops: h.PFpops, MemBytes: h.MNbytes,
		ClientVersion: req.CoreClientMajorVersion*10000 + req.CoreClientMinorVersion*100 + req.CoreClientRelease,
		Coprocs:       req.Coprocs.Resources(), UserID: h.UserID}
}
