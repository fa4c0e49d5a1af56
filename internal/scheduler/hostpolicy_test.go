package scheduler

import (
	"math"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

func TestHRClass(t *testing.T) {
	t.Parallel()
	const (
		intelModel = "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz [Family 6 Model 158 Stepping 10]"
		amdModel   = "AMD Ryzen 9 5950X 16-Core Processor [Family 25 Model 33 Stepping 0]"
	)
	for _, tt := range []struct {
		name              string
		mode              int
		os, vendor, model string
		want              int
	}{
		{"off", hrOff, "Linux Ubuntu", "GenuineIntel", intelModel, 0},
		{"unknown mode is off", 7, "Linux Ubuntu", "GenuineIntel", intelModel, 0},
		{"fine Linux Intel family 6", hrFine, "Linux Ubuntu", "GenuineIntel", intelModel, 2_001_006},
		{"coarse Linux Intel", hrCoarse, "Linux Debian", "GenuineIntel", intelModel, 2_001_000},
		{"fine Windows AMD family 25", hrFine, "Microsoft Windows 11", "AuthenticAMD", amdModel, 1_002_025},
		{"coarse Windows AMD", hrCoarse, "Microsoft Windows 10", "AuthenticAMD", amdModel, 1_002_000},
		{"fine Mac Apple M2", hrFine, "Darwin", "Apple", "Apple M2 Pro", 3_003_002},
		{"fine Intel Mac", hrFine, "Darwin", "GenuineIntel", intelModel, 3_001_006},
		{"fine Raspberry Pi", hrFine, "Linux Raspbian", "ARM", "ARMv7 Processor rev 4 (v7l)", 2_004_007},
		{"fine Android is not Linux", hrFine, "Android", "Qualcomm", "ARMv8 Processor", 5_004_008},
		{"fine FreeBSD", hrFine, "FreeBSD", "GenuineIntel", intelModel, 4_001_006},
		{"fine POWER", hrFine, "Linux", "IBM", "POWER9", 2_005_000},
		{"fine model without a family", hrFine, "Linux", "GenuineIntel", "Some CPU", 2_001_000},
		{"huge family clamped", hrFine, "Linux", "GenuineIntel", "[Family 123456 Model 1]", 2_001_999},
		{"nothing known is still a class", hrFine, "", "", "", 9_009_000},
		{"coarse nothing known", hrCoarse, "Haiku", "Transmeta", "Crusoe", 9_009_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := hrClass(tt.mode, tt.os, tt.vendor, tt.model); got != tt.want {
				t.Fatalf("hrClass(%d, %q, %q, %q) = %d, want %d", tt.mode, tt.os, tt.vendor, tt.model, got, tt.want)
			}
		})
	}
}

func TestReplicationProbability(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		valid      int
		streak     int
		trust      int
		spot       float64
		quarantine bool
		want       float64
	}{
		{"new host: always replicated", 0, 0, 10, 0.1, false, 1},
		{"one short of trust", 9, 0, 10, 0.1, false, 1},
		{"just trusted: trust/valid = 1", 10, 0, 10, 0.1, false, 1},
		{"twice the trust: half", 20, 0, 10, 0.1, false, 0.5},
		{"long record: the spot-check floor", 1000, 0, 10, 0.1, false, 0.1},
		{"no spot checks", 1000, 0, 10, 0, false, 0.01},
		{"an error since: not trusted", 1000, 1, 10, 0.1, false, 1},
		{"quarantined: not trusted", 1000, 0, 10, 0.1, true, 1},
		{"spot check above 1 is 1", 1000, 0, 10, 3, false, 1},
		{"NaN spot check is 0", 1000, 0, 10, math.NaN(), false, 0.01},
		{"trust 0 with no record", 0, 0, 0, 0.25, false, 0.25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := row.Host{ConsecutiveValid: tt.valid, ErrorStreak: tt.streak}
			if got := replicationProbability(h, tt.trust, tt.spot, tt.quarantine); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("replicationProbability(valid %d, streak %d, trust %d, spot %v, quarantined %v) = %v, want %v",
					tt.valid, tt.streak, tt.trust, tt.spot, tt.quarantine, got, tt.want)
			}
		})
	}
}

func TestQuarantineLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		streak    int
		ncpus     int
		setting   int
		wantQuar  bool
		wantLimit int
	}{
		{"healthy 4-CPU host", 0, 4, 5, false, 16},
		{"below the streak", 4, 4, 5, false, 16},
		{"at the streak", 5, 4, 5, true, 1},
		{"beyond the streak", 50, 8, 5, true, 1},
		{"quarantine off", 50, 2, 0, false, 8},
		{"no CPU count reported", 0, 0, 5, false, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := row.Host{ErrorStreak: tt.streak, PNCPUs: tt.ncpus}
			q := quarantined(h, tt.setting)
			if q != tt.wantQuar {
				t.Fatalf("quarantined(streak %d, setting %d) = %v, want %v", tt.streak, tt.setting, q, tt.wantQuar)
			}
			if got := inProgressLimit(h, 4, q); got != tt.wantLimit {
				t.Fatalf("inProgressLimit(%d CPUs, 4 per CPU, quarantined %v) = %d, want %d", tt.ncpus, q, got, tt.wantLimit)
			}
		})
	}
}

func TestReliableHost(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		valid      int
		streak     int
		turnaround float64
		delay      int64
		want       bool
	}{
		{"fast and trusted", 10, 0, 3600, 86400, true},
		{"exactly a quarter of the delay", 10, 0, 21600, 86400, true},
		{"too slow", 10, 0, 21601, 86400, false},
		{"never reported: turnaround unknown", 10, 0, 0, 86400, false},
		{"not enough valid results", 9, 0, 3600, 86400, false},
		{"an error since", 100, 1, 3600, 86400, false},
		{"no delay bound", 10, 0, 3600, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := row.Host{ConsecutiveValid: tt.valid, ErrorStreak: tt.streak, AvgTurnaround: tt.turnaround}
			if got := reliableHost(h, 10, tt.delay); got != tt.want {
				t.Fatalf("reliableHost(valid %d, streak %d, turnaround %v, delay %d) = %v, want %v",
					tt.valid, tt.streak, tt.turnaround, tt.delay, got, tt.want)
			}
		})
	}
}

func TestClaimedCredit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                string
		cpu, elapsed, fpops float64
		want                float64
	}{
		{"a day at 1 GFLOPS is 200", 86400, 90000, 1e9, 200},
		{"CPU time first", 43200, 86400, 2e9, 200},
		{"elapsed time when no CPU time", 0, 86400, 1e9, 200},
		{"no speed known", 86400, 86400, 0, 0},
		{"nonsense is 0", math.NaN(), -5, math.Inf(1), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := claimedCredit(tt.cpu, tt.elapsed, tt.fpops); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("claimedCredit(%v, %v, %v) = %v, want %v", tt.cpu, tt.elapsed, tt.fpops, got, tt.want)
			}
		})
	}
}
