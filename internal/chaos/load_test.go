package chaos

import "testing"

func TestLoadOptionsDefaultsAndRefusals(t *testing.T) {
	lo := LoadOptions{BinDir: "bin"}
	if err := lo.defaults(); err != nil || lo.Duration.Minutes() != 5 || lo.Hosts != 400 || lo.DBCut.Seconds() != 10 || lo.OutDir != "load-report" {
		t.Errorf("defaults() = %v, duration %s, hosts %d, cut %s, out %q; want nil, 5m, 400, 10s, load-report",
			err, lo.Duration, lo.Hosts, lo.DBCut, lo.OutDir)
	}
	bad := LoadOptions{BinDir: "bin", Duration: 20e9, DBCut: 10e9} // the cut would outlast the middle
	if err := bad.defaults(); err == nil {
		t.Error("defaults() of a 10 s cut in a 20 s run = nil, want an error")
	}
}
