package clientpolicy

import (
	"math/rand/v2"
	"testing"
)

// benchHost is a host with 8 CPUs, 3 projects (50/30/20) and 40 tasks of
// 1-4 hours with deadlines one to three days out.
func benchHost(st Strategy) *Host {
	rng := rand.New(rand.NewPCG(1, 2))
	h := NewHost(8, 1, Config{Strategy: st}, threeProjects())
	for i := range 40 {
		h.AddTask(&Task{
			ID: int64(i + 1), Project: h.Projects[i%3],
			EstCPU: 3600 * (1 + 3*rng.Float64()), Deadline: 86400 * (1 + 2*rng.Float64()),
		})
	}
	return h
}

// BenchmarkSchedule is one full rescheduling (a period has ended) with
// debts to account: the running tasks computed a minute since the last
// call.
func BenchmarkSchedule(b *testing.B) {
	for _, st := range Strategies() {
		b.Run(string(st), func(b *testing.B) {
			h := benchHost(st)
			now := 0.0
			h.Schedule(now)
			b.ReportAllocs()
			for b.Loop() {
				now += h.cfg().SchedPeriod
				for _, t := range h.Tasks {
					if t.State == TaskRunning {
						t.CPU = min(t.CPU+60, t.EstCPU/2) // never finishes
					}
				}
				h.Schedule(now)
				if now > 86400 {
					now = 0 // deadlines stay ahead
					h.periodStart = -h.cfg().SchedPeriod
				}
			}
		})
	}
}

// BenchmarkNextRPC is the work-fetch decision on the same host.
func BenchmarkNextRPC(b *testing.B) {
	h := benchHost(StrategyEDF)
	h.Schedule(0)
	b.ReportAllocs()
	for b.Loop() {
		h.NextRPC(100)
		h.NextRPCTime(100)
	}
}
