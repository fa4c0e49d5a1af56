package clientpolicy

import (
	"fmt"
	"strings"
)

// Strategy names a CPU-scheduling policy.
type Strategy string

// The CPU-scheduling policies.
const (
	// StrategyDebt is seed 000: version-4 debt, preemptive at the
	// scheduling period.
	StrategyDebt Strategy = "debt"
	// StrategyEDF is seed 001: earliest deadline first for tasks a
	// round-robin simulation says would miss their deadline, short-term
	// debt for the other CPUs.
	StrategyEDF Strategy = "edf"
	// StrategyFairShare is seed 004: the project with the lowest predicted
	// task end, weighted by share, gets the free CPU.
	StrategyFairShare Strategy = "fair-share"
	// StrategyWRR is seed 004: weighted round robin, weight = share.
	StrategyWRR Strategy = "wrr"
	// StrategyIWRR is seed 004: interleaved weighted round robin.
	StrategyIWRR Strategy = "iwrr"
)

// Strategies lists every strategy, for --help and tests.
func Strategies() []Strategy {
	return []Strategy{StrategyDebt, StrategyEDF, StrategyFairShare, StrategyWRR, StrategyIWRR}
}

// ParseStrategy reads a strategy name as a flag or scenario file spells it.
func ParseStrategy(s string) (Strategy, error) {
	for _, st := range Strategies() {
		if strings.EqualFold(s, string(st)) {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown strategy %q (want one of %s)", s, strategyNames())
}

func strategyNames() string {
	names := make([]string, 0, len(Strategies()))
	for _, st := range Strategies() {
		names = append(names, string(st))
	}
	return strings.Join(names, ", ")
}

// preemptive reports whether the strategy may take a CPU from a running
// task (at the end of the scheduling period, or for a deadline at risk).
// The seed-004 strategies only choose what starts on a free CPU.
func (s Strategy) preemptive() bool {
	return s == StrategyDebt || s == StrategyEDF
}

// RuntimeStat is how the seed-004 strategies summarise a project's past
// task runtimes.
type RuntimeStat string

// The runtime statistics.
const (
	StatAverage RuntimeStat = "average"
	StatMedian  RuntimeStat = "median"
)

// ParseRuntimeStat reads a runtime statistic name.
func ParseRuntimeStat(s string) (RuntimeStat, error) {
	switch strings.ToLower(s) {
	case string(StatAverage):
		return StatAverage, nil
	case string(StatMedian):
		return StatMedian, nil
	}
	return "", fmt.Errorf("unknown runtime statistic %q (want average or median)", s)
}

// ReportImmediately as Config.ReportAfter reports a finished task at the
// next chance instead of letting it wait for a later session; the live
// client's tests and end-to-end runs use it.
const ReportImmediately = -1.0

// Config is the client's policy settings. Zero fields take the defaults
// noted on each; the real client's values, in seconds.
type Config struct {
	Strategy    Strategy    // default StrategyEDF
	RuntimeStat RuntimeStat // default StatAverage

	// ConnectPeriod is T of seed 000: the host keeps between T and 2T of
	// work so that it contacts each project about once per T. Default
	// 86400.
	ConnectPeriod float64
	// SchedPeriod is the scheduling period MV: the preemptive strategies
	// reconsider every CPU this often. Default 3600.
	SchedPeriod float64
	// MaxSTD caps short-term debt (seed 001). Default 86400.
	MaxSTD float64

	// RPCBackoffMin and RPCBackoffMax bound the back-off after failed
	// RPCs (seed 002). Defaults 60 and 14400.
	RPCBackoffMin, RPCBackoffMax float64
	// WorkFetchBackoffMin and WorkFetchBackoffMax bound the back-off after
	// work requests that got nothing. Defaults 600 and 86400.
	WorkFetchBackoffMin, WorkFetchBackoffMax float64
	// ErrorBackoffMin and ErrorBackoffMax bound the back-off of a
	// project's RPCs after consecutive task crashes or transfer failures
	// (seed 002). Defaults 60 and 14400.
	ErrorBackoffMin, ErrorBackoffMax float64

	// ReportAfter is how long a finished task may wait before it forces a
	// report-result session: 0 means 86400, ReportImmediately means at
	// once.
	ReportAfter float64
	// ReportMargin forces a report-result session when a finished task's
	// deadline is this close. Default 3600.
	ReportMargin float64
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Strategy == "" {
		c.Strategy = StrategyEDF
	}
	if c.RuntimeStat == "" {
		c.RuntimeStat = StatAverage
	}
	def(&c.ConnectPeriod, 86400)
	def(&c.SchedPeriod, 3600)
	def(&c.MaxSTD, 86400)
	def(&c.RPCBackoffMin, 60)
	def(&c.RPCBackoffMax, 14400)
	def(&c.WorkFetchBackoffMin, 600)
	def(&c.WorkFetchBackoffMax, 86400)
	def(&c.ErrorBackoffMin, 60)
	def(&c.ErrorBackoffMax, 14400)
	if c.ReportAfter < 0 {
		c.ReportAfter = ReportImmediately
	} else {
		def(&c.ReportAfter, 86400)
	}
	def(&c.ReportMargin, 3600)
	return c
}
