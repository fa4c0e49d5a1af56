package scalebench

import (
	"slices"
	"strconv"
)

// WorkingSet is one size's buffer-pool sweep: each phase's database cost
// under each pool, and the smallest pool that keeps the phase at its best.
type WorkingSet struct {
	// Pools are the swept innodb_buffer_pool_size values, smallest first.
	Pools []string `json:"pools"`
	// Phases are keyed status_page, feeder, dispatch, transitioner,
	// validator, assimilator, file_deleter and db_purge.
	Phases map[string]*PhaseWorkingSet `json:"phases"`
}

// PhaseWorkingSet is one phase across the pools.
type PhaseWorkingSet struct {
	// Unit is what the database CPU is counted per: job, request (a
	// scheduler request or a status page), or 1000 rows (the feeder's
	// enumerated rows).
	Unit string `json:"unit"`
	// DispatchConns is, for dispatch, the load level compared: the most
	// connections every pool ran with work to send, so that each pool is
	// measured under the same load.
	DispatchConns int        `json:"dispatch_conns,omitempty"`
	Pools         []PoolCost `json:"pools"`
	// WorkingSetMB is the smallest pool whose database CPU per unit is
	// within workingSetTolerance of the best over the pools: the pool
	// the phase needs to run at its best.
	WorkingSetMB float64 `json:"working_set_mb"`
	// OnlyLargest says no pool but the largest was within the tolerance:
	// the phase still got cheaper at the largest pool, so its working set
	// is more than the next smaller pool and may be more than the largest.
	OnlyLargest bool `json:"only_largest"`
	// ReadsWorkingSetMB is the same from the buffer pool's disk reads per
	// unit: the smallest pool within workingSetTolerance of the fewest, or
	// missing less than once per readsNegligible units. Reads do not vary
	// with the machine's other load as CPU does, so on a shared machine
	// this is the steadier of the two; ReadsOnlyLargest as OnlyLargest.
	ReadsWorkingSetMB float64 `json:"reads_working_set_mb"`
	ReadsOnlyLargest  bool    `json:"reads_only_largest"`
}

// PoolCost is one phase under one pool.
type PoolCost struct {
	Pool           string  `json:"pool"`
	PoolMB         float64 `json:"pool_mb"`
	Units          int64   `json:"units"`
	DBCPUMSPerUnit float64 `json:"db_cpu_ms_per_unit"`
	// DiskReads are the reads the pool missed (Innodb_buffer_pool_reads),
	// PagesRead every page read from disk, read-ahead included
	// (Innodb_pages_read).
	DiskReads int64 `json:"buffer_pool_disk_reads"`
	PagesRead int64 `json:"buffer_pool_pages_read"`
}

// workingSetTolerance is how far above the best database CPU per unit a
// pool may be and still count as keeping the phase at its best: closer
// than the run-to-run noise of a phase's CPU would call noise a miss.
const workingSetTolerance = 0.10

// readsNegligible is how many units may share one disk read for the pool
// to count as missing nothing: a pool that held everything still reads a
// page now and then (a page the phase creates, the server's own tables).
const readsNegligible = 100

// phaseOrder is the working set's phases in the report's order.
var phaseOrder = []string{"status_page", "feeder", "dispatch", "transitioner", "validator", "assimilator", "file_deleter", "db_purge"}

// phaseCost is one phase's raw figures in one run.
type phaseCost struct {
	units                int64
	dbCPUS               float64
	diskReads, pagesRead int64
}

// workingSet derives the sweep's outcome from runs[i], measured under
// pools[i] (smallest first). A phase no run measured is left out.
func workingSet(pools []string, runs []*Size) *WorkingSet {
	ws := &WorkingSet{Pools: pools, Phases: map[string]*PhaseWorkingSet{}}
	conns := dispatchConns(runs)
	for _, phase := range phaseOrder {
		p := &PhaseWorkingSet{Unit: "job"}
		var costs, reads []float64
		for i, r := range runs {
			c, ok := costOf(r, phase, conns)
			if !ok || c.units <= 0 {
				continue
			}
			per := c.dbCPUS * 1000 / float64(c.units)
			switch phase {
			case "feeder":
				p.Unit, per = "1000 rows", per*1000
			case "dispatch", "status_page":
				p.Unit = "request"
			}
			mb, _ := poolMB(pools[i])
			p.Pools = append(p.Pools, PoolCost{Pool: pools[i], PoolMB: mb, Units: c.units, DBCPUMSPerUnit: round3(per),
				DiskReads: c.diskReads, PagesRead: c.pagesRead})
			costs = append(costs, per)
			reads = append(reads, float64(c.diskReads)/float64(c.units))
		}
		if len(costs) == 0 {
			continue
		}
		if phase == "dispatch" {
			p.DispatchConns = conns
		}
		i := smallestNearBest(costs, 0)
		p.WorkingSetMB, p.OnlyLargest = p.Pools[i].PoolMB, i == len(costs)-1 && p.Pools[i].Pool == pools[len(pools)-1]
		i = smallestNearBest(reads, 1.0/readsNegligible)
		p.ReadsWorkingSetMB, p.ReadsOnlyLargest = p.Pools[i].PoolMB, i == len(reads)-1 && p.Pools[i].Pool == pools[len(pools)-1]
		ws.Phases[phase] = p
	}
	return ws
}

// smallestNearBest is the first of v (the pools, smallest first) within
// workingSetTolerance of the least, or at most floor.
func smallestNearBest(v []float64, floor float64) int {
	best := slices.Min(v)
	for i, x := range v {
		if x <= best*(1+workingSetTolerance) || x <= floor {
			return i
		}
	}
	return len(v) - 1
}

// dispatchConns is the highest dispatch level every run ran with work to
// send (0 if none): a smaller pool may stop the levels earlier, and cost
// per request grows with the load, so pools are compared at one level.
func dispatchConns(runs []*Size) int {
	common := -1
	for _, r := range runs {
		most := 0
		if r.Dispatch != nil {
			for _, l := range r.Dispatch.Levels {
				if !l.BacklogDry && l.Requests > 0 {
					most = max(most, l.Conns)
				}
			}
		}
		if common < 0 || most < common {
			common = most
		}
	}
	return max(common, 0)
}

// costOf reads one phase's figures from a run.
func costOf(r *Size, phase string, conns int) (phaseCost, bool) {
	switch phase {
	case "status_page":
		if c := r.StatusPage; c != nil {
			return phaseCost{c.Jobs, c.DBCPUS, c.BufferPoolDiskReads, c.BufferPoolPagesRead}, true
		}
	case "feeder":
		if c := r.Feeder; c != nil {
			return phaseCost{c.EnumeratedRows, c.DBCPUS, c.BufferPoolDiskReads, c.BufferPoolPagesRead}, true
		}
	case "dispatch":
		if r.Dispatch == nil || conns == 0 {
			return phaseCost{}, false
		}
		for _, l := range r.Dispatch.Levels {
			if l.Conns == conns {
				return phaseCost{l.Requests, l.DBCPUS, l.DiskReads, l.PagesRead}, true
			}
		}
	default:
		if c := r.Daemons[phase]; c != nil {
			return phaseCost{c.Jobs, c.DBCPUS, c.BufferPoolDiskReads, c.BufferPoolPagesRead}, true
		}
	}
	return phaseCost{}, false
}

// label is how the text report shows the working set in MiB, with a "+"
// when only the largest pool kept the phase at its best: it may need more.
func (p *PhaseWorkingSet) label() string { return mbLabel(p.WorkingSetMB, p.OnlyLargest) }

// readsLabel is label's by disk reads.
func (p *PhaseWorkingSet) readsLabel() string {
	return mbLabel(p.ReadsWorkingSetMB, p.ReadsOnlyLargest)
}

func mbLabel(mb float64, onlyLargest bool) string {
	s := strconv.FormatFloat(mb, 'f', -1, 64)
	if onlyLargest {
		s += "+"
	}
	return s
}
