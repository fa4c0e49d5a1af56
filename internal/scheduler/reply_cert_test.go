package scheduler

import (
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/store"
)

// TestUploadCertificateSigning: with an Ed25519 key the scheduler signs
// upload certificates with it (what the data server's UploadVerifier
// accepts, and only for that file and size limit), else with the RSA key.
func TestUploadCertificateSigning(t *testing.T) {
	t.Parallel()
	rsaKey, err := uploadKey()
	if err != nil {
		t.Fatal(err)
	}
	edKey, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	edPub := edKey.Public().(ed25519.PublicKey)
	verifier := keys.UploadVerifier{RSA: &rsaKey.PublicKey, Ed25519: []ed25519.PublicKey{edPub}}
	cert := []byte(keys.UploadCertificate("wu_9_0_r0_out", 1e5, 1900000000))

	ed := &Service{deps: Deps{UploadKey: rsaKey, UploadCertKey: edKey}}
	sig, err := ed.signUploadCertificate("wu_9_0_r0_out", 1e5, 1900000000)
	if err != nil {
		t.Fatalf("signUploadCertificate(ed25519) error %v", err)
	}
	if err := keys.VerifyEd25519(edPub, cert, sig); err != nil {
		t.Fatalf("certificate signed with both keys set does not verify with the Ed25519 key: %v\n%s", err, sig)
	}
	if err := verifier.Verify([]byte(keys.UploadCertificate("wu_9_0_r0_out", 1e6, 1900000000)), sig); !errors.Is(err, keys.ErrBadSignature) {
		t.Fatalf("Ed25519 certificate verifies for another max_nbytes: %v", err)
	}

	rsaOnly := &Service{deps: Deps{UploadKey: rsaKey}}
	sig, err = rsaOnly.signUploadCertificate("wu_9_0_r0_out", 1e5, 1900000000)
	if err != nil {
		t.Fatalf("signUploadCertificate(rsa) error %v", err)
	}
	if err := keys.Verify(&rsaKey.PublicKey, cert, sig); err != nil {
		t.Fatalf("certificate signed with only the RSA key does not verify with it: %v", err)
	}
	if err := verifier.Verify(cert, sig); err != nil {
		t.Fatalf("UploadVerifier refuses the RSA certificate: %v", err)
	}
}

func TestNewUploadKeys(t *testing.T) {
	t.Parallel()
	edKey, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	base := func() Options {
		return Options{Config: testConfig(), Deps: Deps{Store: (*store.Store)(nil), Cache: NewCacheFile(filepath.Join(t.TempDir(), "cache"))}}
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Options)
		wantErr string
	}{
		{"no key", func(*Options) {}, "no upload key"},
		{"Ed25519 key alone", func(o *Options) { o.UploadCertKey = edKey }, ""},
		{"short Ed25519 key", func(o *Options) { o.UploadCertKey = edKey[:32] }, "upload certificate key is 32 bytes"},
	} {
		o := base()
		tc.mod(&o)
		_, err := New(o.Config, o.Deps)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: New() error %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: New() = %v, want an error with %q", tc.name, err, tc.wantErr)
		}
	}
}
