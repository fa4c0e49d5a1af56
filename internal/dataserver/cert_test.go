package dataserver

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

// TestUploadCertificateKinds: a data server holding the RSA upload key and
// Ed25519 keys accepts a certificate made by any of them, so results sent
// before a project switched keys still upload, and refuses everything else.
func TestUploadCertificateKinds(t *testing.T) {
	t.Parallel()
	edKey, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	oldEd, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	pub := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
	both := setup(t, func(o *Options) { o.UploadCertKeys = []ed25519.PublicKey{pub(edKey), pub(oldEd)} })
	edOnly := setup(t, func(o *Options) { o.UploadKey = nil; o.UploadCertKeys = []ed25519.PublicKey{pub(edKey)} })
	edSig := func(k ed25519.PrivateKey, name string, maxNbytes int64) string {
		// The client strips the whitespace around the signature it stored
		// and the upload header puts "\n" before it only.
		expires := time.Now().Add(time.Hour).Unix()
		sig := keys.SignEd25519(k, []byte(keys.UploadCertificate(name, float64(maxNbytes), expires)))
		return strings.TrimSpace(keys.UploadSignature(sig, expires))
	}
	data := []byte("output bytes")
	n := int64(len(data))
	for i, tc := range []struct {
		what string
		b    *bundle
		sig  func(name string) string
		max  int64 // max_nbytes the client sends; the certificate says 100
		want int
	}{
		{"ed25519 certificate", both, func(nm string) string { return edSig(edKey, nm, 100) }, 100, protocol.UploadOK},
		{"previous ed25519 key", both, func(nm string) string { return edSig(oldEd, nm, 100) }, 100, protocol.UploadOK},
		{"rsa certificate beside ed25519 keys", both, func(nm string) string { return both.cert(t, nm, 100) }, 100, protocol.UploadOK},
		{"ed25519 certificate, ed25519-only server", edOnly, func(nm string) string { return edSig(edKey, nm, 100) }, 100, protocol.UploadOK},
		{"rsa certificate, ed25519-only server", edOnly, func(nm string) string { return edOnly.cert(t, nm, 100) }, 100, protocol.UploadPermanent},
		{"retired ed25519 key, ed25519-only server", edOnly, func(nm string) string { return edSig(oldEd, nm, 100) }, 100, protocol.UploadPermanent},
		{"forged: a stranger's ed25519 key", both, func(nm string) string { return edSig(stranger, nm, 100) }, 100, protocol.UploadPermanent},
		{"tampered name", both, func(nm string) string { return edSig(edKey, nm+"x", 100) }, 100, protocol.UploadPermanent},
		{"tampered max_nbytes", both, func(nm string) string { return edSig(edKey, nm, 100) }, 1 << 20, protocol.UploadPermanent},
		{"truncated ed25519 signature", both, func(nm string) string { return edSig(edKey, nm, 100)[:64] }, 100, protocol.UploadPermanent},
	} {
		name := "wu_cert_" + string(rune('a'+i)) + "_0"
		rep := tc.b.post(t, uploadBody(t, name, tc.sig(name), tc.max, n, 0, data))
		if rep.Status != tc.want {
			t.Errorf("%s: reply %+v, want status %d", tc.what, rep, tc.want)
		}
		got, stored := tc.b.stored(t, name)
		if wantStored := tc.want == protocol.UploadOK; stored != wantStored || (stored && string(got) != string(data)) {
			t.Errorf("%s: stored %v (%q), want stored %v", tc.what, stored, got, wantStored)
		}
	}
	if got := testutil.ToFloat64(both.h.metrics.uploads.WithLabelValues(upBadCert)); got != 4 {
		t.Errorf("server with both keys: uploads_total{outcome=bad_cert} = %v, want 4", got)
	}
	checkContained(t, both)
}

func TestNewRefusesShortCertKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := New(Options{DownloadDir: dir + "/d", UploadDir: dir + "/u", UploadCertKeys: []ed25519.PublicKey{make([]byte, 31)}})
	if err == nil {
		t.Fatal("New(31-byte Ed25519 key) = nil error, want a refusal")
	}
}
