package scheduler

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/row"
)

// Homogeneous redundancy modes (app.homogeneous_redundancy).
const (
	hrOff    = 0
	hrFine   = 1 // OS family × CPU vendor × CPU model family
	hrCoarse = 2 // OS family × CPU vendor
)

// OS families of a host class. The numbers are stored in workunit.hr_class
// (through hrClass) and must never change.
const (
	osWindows = 1
	osLinux   = 2
	osDarwin  = 3
	osBSD     = 4
	osAndroid = 5
	osOther   = 9
)

// CPU vendors of a host class. Stored like the OS families: never renumber.
const (
	vendorIntel = 1
	vendorAMD   = 2
	vendorApple = 3
	vendorARM   = 4
	vendorPower = 5
	vendorOther = 9
)

// maxModelFamily bounds the model-family part of a class.
const maxModelFamily = 999

// hrClass is the homogeneous redundancy class of a host for an app of the
// given mode: os × 1,000,000 + vendor × 1,000 + model family (0 in coarse
// mode, or when the model names no family), e.g. 2001006 for Linux on an
// Intel family-6 CPU. Jobs of an HR app go only to hosts of one class, whose
// numerics agree bit for bit. It is 0 (no class: anyone) when mode is off or
// unknown, and never 0 otherwise.
func hrClass(mode int, osName, vendor, model string) int {
	if mode != hrFine && mode != hrCoarse {
		return 0
	}
	c := osFamily(osName)*1_000_000 + cpuVendor(vendor)*1_000
	if mode == hrFine {
		c += modelFamily(model)
	}
	return c
}

// osFamily classifies the client's os_name ("Microsoft Windows 11", "Linux
// Ubuntu", "Darwin", "FreeBSD", "Android").
func osFamily(name string) int {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "android"):
		return osAndroid
	case strings.Contains(n, "windows"):
		return osWindows
	case strings.Contains(n, "darwin"), strings.Contains(n, "mac"), strings.Contains(n, "os x"):
		return osDarwin
	case strings.Contains(n, "linux"):
		return osLinux
	case strings.Contains(n, "bsd"):
		return osBSD
	}
	return osOther
}

// cpuVendor classifies the client's p_vendor ("GenuineIntel",
// "AuthenticAMD", "Apple", "ARM", "Qualcomm", "IBM").
func cpuVendor(name string) int {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "intel"):
		return vendorIntel
	case strings.Contains(n, "amd"):
		return vendorAMD
	case strings.Contains(n, "apple"):
		return vendorApple
	case strings.HasPrefix(n, "arm") || strings.Contains(n, "qualcomm") || strings.Contains(n, "broadcom") ||
		strings.Contains(n, "samsung") || strings.Contains(n, "mediatek") || strings.Contains(n, "rockchip") ||
		strings.Contains(n, "allwinner"):
		return vendorARM
	case strings.Contains(n, "ibm"), strings.Contains(n, "power"):
		return vendorPower
	}
	return vendorOther
}

// modelFamilyPatterns find the family number in a p_model: x86 clients
// append "[Family 6 Model 158 Stepping 10]", ARM ones name the architecture
// ("ARMv7 Processor rev 4"), Apple silicon its generation ("Apple M2").
var modelFamilyPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bfamily\s+(\d+)`),
	regexp.MustCompile(`(?i)\barmv(\d+)`),
	regexp.MustCompile(`(?i)\bapple\s+m(\d+)`),
}

// modelFamily is the CPU model family in p_model, 0 when it names none.
func modelFamily(model string) int {
	for _, re := range modelFamilyPatterns {
		if m := re.FindStringSubmatch(model); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				return min(n, maxModelFamily)
			}
			return 0
		}
	}
	return 0
}

// quarantined reports whether a host has failed so often in a row (streak
// or more errors or invalid results; streak 0 turns quarantine off) that it
// gets one task at a time, no reliable-only task, and every adaptive
// replication job it runs is replicated.
func quarantined(h row.Host, streak int) bool {
	return streak > 0 && h.ErrorStreak >= streak
}

// inProgressLimit is how many tasks a host may hold: perCPU per CPU, or one
// when quarantined.
func inProgressLimit(h row.Host, perCPU int, quarantine bool) int {
	if quarantine {
		return 1
	}
	return perCPU * max(h.PNCPUs, 1)
}

// trustedHost reports whether adaptive replication may trust a host with a
// job alone: trustValid valid results in a row and no error since.
func trustedHost(h row.Host, trustValid int) bool {
	return h.ErrorStreak == 0 && h.ConsecutiveValid >= trustValid
}

// replicationProbability is the chance that a job of an adaptive replication
// app sent to the host is replicated (its quorum raised): 1 for a host that
// is not trusted or is quarantined; for a trusted one trustValid /
// consecutive_valid, so spot checks thin out as the host proves itself, but
// never below spotCheck.
func replicationProbability(h row.Host, trustValid int, spotCheck float64, quarantine bool) float64 {
	if quarantine || !trustedHost(h, trustValid) {
		return 1
	}
	spot := clamp01(spotCheck)
	p := 0.0
	if h.ConsecutiveValid > 0 {
		p = float64(max(trustValid, 0)) / float64(h.ConsecutiveValid)
	}
	return min(max(p, spot), 1)
}

// clamp01 is f limited to [0, 1]; NaN is 0.
func clamp01(f float64) float64 {
	if !(f > 0) {
		return 0
	}
	return min(f, 1)
}

// replicates decides whether a send of one of app's jobs to host h raises
// the job's quorum (Send.Replicate), draw drawing uniformly from [0, 1):
// only under adaptive replication, with replicationProbability. Nothing is
// drawn for another app.
func replicates(app row.App, h row.Host, trustValid int, spotCheck float64, quarantine bool, draw func() float64) bool {
	return app.AdaptiveReplication && draw() < replicationProbability(h, trustValid, spotCheck, quarantine)
}

// reliableHost reports whether a host may get a reliable-only instance
// (row.SendReliableOnly, a tail copy meant to finish a batch quickly) of a
// job with the given delay bound: trusted, and known to report within a
// quarter of the delay bound.
func reliableHost(h row.Host, trustValid int, delayBound int64) bool {
	return trustedHost(h, trustValid) && h.AvgTurnaround > 0 && h.AvgTurnaround <= 0.25*float64(delayBound)
}

// creditPerFlop is BOINC's cobblestone: 200 credits a day for a computer
// doing 1 GFLOPS.
const creditPerFlop = 200 / 86400e9

// claimedCredit is the credit a host's own measurements claim for a result:
// its CPU time (the elapsed time when it reports none) at its benchmarked
// speed.
func claimedCredit(cpuTime, elapsedTime, pFpops float64) float64 {
	t := finite(cpuTime)
	if t == 0 {
		t = finite(elapsedTime)
	}
	return t * finite(pFpops) * creditPerFlop
}
