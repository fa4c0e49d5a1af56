package connlimit

import (
	"net"
	"net/netip"
	"testing"
)

func tcpAddr(s string) *net.TCPAddr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// TestAdmit checks the bookkeeping: per IPv4 address and IPv6 /64, exempt
// networks counted only overall, and places given back.
func TestAdmit(t *testing.T) {
	t.Parallel()
	l := Listen(nil, Limits{Max: 5, PerAddr: 2, Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil)
	admit := func(peer string) (netip.Prefix, bool, string) {
		k, counted := l.key(tcpAddr(peer))
		return k, counted, l.admit(k, counted)
	}
	for _, peer := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:2"} {
		if _, _, r := admit(peer); r != "" {
			t.Fatalf("%s refused (%s), want admitted", peer, r)
		}
	}
	if _, _, r := admit("[2001:db8:1:2::77]:3"); r != reasonAddress {
		t.Errorf("a third connection from one /64 = %q, want %q", r, reasonAddress)
	}
	if _, _, r := admit("[2001:db8:1:3::1]:3"); r != "" {
		t.Errorf("another /64 refused (%s)", r)
	}
	for range 2 { // exempt: over PerAddr, within Max
		if _, counted, r := admit("127.0.0.1:9"); r != "" || counted {
			t.Errorf("loopback (exempt) = %q counted %v, want admitted, not counted", r, counted)
		}
	}
	if _, _, r := admit("192.0.2.1:1"); r != reasonTotal {
		t.Fatalf("a sixth connection = %q, want %q", r, reasonTotal)
	}
	l.release(netip.MustParsePrefix("2001:db8:1:2::/64"), true)
	if _, _, r := admit("192.0.2.1:1"); r != "" {
		t.Errorf("after a close: %q, want admitted", r)
	}
	if len(l.byAddr) != 3 {
		t.Errorf("tracking %d networks, want 3", len(l.byAddr))
	}
}

func TestDefaultMax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{{0, leastMax}, {1024, 384}, {20000, 9872}, {1 << 20, (1<<20 - 256) / 2}} {
		if got := DefaultMax(tc.nofile); got != tc.want {
			t.Errorf("DefaultMax(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
		if tc.nofile > 2*leastMax+reservedFDs && 2*uint64(DefaultMax(tc.nofile))+reservedFDs > tc.nofile {
			t.Errorf("DefaultMax(%d) leaves no room for a file per connection and the reserve", tc.nofile)
		}
	}
}
