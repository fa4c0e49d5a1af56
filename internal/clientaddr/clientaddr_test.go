package clientaddr

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClient(t *testing.T) {
	t.Parallel()
	proxies, err := ParseProxies([]string{"127.0.0.1/32, 10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		peer string
		xff  []string
		want string
	}{
		{"not a proxy: header ignored", "192.0.2.9", []string{"203.0.113.7"}, "192.0.2.9"},
		{"proxy without header", "127.0.0.1", nil, "127.0.0.1"},
		{"proxy", "127.0.0.1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"client's forged entries left of the proxy's", "127.0.0.1", []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
		{"chain of proxies", "127.0.0.1", []string{"203.0.113.7, 10.1.2.3"}, "203.0.113.7"},
		{"several headers", "127.0.0.1", []string{"198.51.100.1", "203.0.113.7, 10.1.2.3"}, "203.0.113.7"},
		{"only proxies", "127.0.0.1", []string{"10.0.0.2, 10.0.0.1"}, "10.0.0.2"},
		{"garbage before a client", "127.0.0.1", []string{"203.0.113.7, garbage, 10.0.0.1"}, "10.0.0.1"},
		{"with ports", "::1", []string{"[2001:db8::5]:4711"}, "2001:db8::5"},
		{"mapped proxy address", "::ffff:127.0.0.1", []string{"203.0.113.7:80"}, "203.0.113.7"},
	} {
		got := proxies.Client(netip.MustParseAddr(tc.peer), tc.xff)
		if got.String() != tc.want {
			t.Errorf("%s: Client(%s, %q) = %s, want %s", tc.name, tc.peer, tc.xff, got, tc.want)
		}
	}
	if got := Proxies(nil).Client(netip.MustParseAddr("127.0.0.1"), []string{"203.0.113.7"}); got.String() != "127.0.0.1" {
		t.Errorf("no proxies: Client = %s, want the peer", got)
	}
}

func TestParseProxiesRefusesGarbage(t *testing.T) {
	t.Parallel()
	if _, err := ParseProxies([]string{"10.0.0.0/8,nonsense"}); err == nil {
		t.Error("ParseProxies of nonsense = nil error")
	}
}

func TestHandlerAndFrom(t *testing.T) {
	t.Parallel()
	proxies, err := ParseProxies([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	h := proxies.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = From(r) }))
	for _, tc := range []struct{ remote, xff, want string }{
		{"127.0.0.1:5000", "203.0.113.7", "203.0.113.7"},
		{"192.0.2.9:5000", "203.0.113.7", "192.0.2.9"},
		{"[2001:db8::1]:5000", "", "2001:db8::1"},
		{"pipe", "203.0.113.7", "pipe"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got != tc.want {
			t.Errorf("From(peer %s, X-Forwarded-For %q) = %q, want %q", tc.remote, tc.xff, got, tc.want)
		}
	}
}
