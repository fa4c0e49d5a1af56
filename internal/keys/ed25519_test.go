package keys

import (
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var sharedEd25519 = sync.OnceValues(GenerateEd25519)

func newEd25519(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	k, err := sharedEd25519()
	if err != nil {
		t.Fatalf("GenerateEd25519() error %v", err)
	}
	return k
}

func TestEd25519RoundTrip(t *testing.T) {
	t.Parallel()
	k := newEd25519(t)
	text := FormatEd25519Private(k)
	if !strings.HasPrefix(text, "-----BEGIN PRIVATE KEY-----\n") {
		t.Fatalf("FormatEd25519Private() = %q, want a PEM PRIVATE KEY block", text)
	}
	got, err := ParseEd25519Private(text)
	if err != nil {
		t.Fatalf("ParseEd25519Private(FormatEd25519Private(k)) error %v", err)
	}
	if !got.Equal(k) {
		t.Fatal("ParseEd25519Private(FormatEd25519Private(k)) is a different key")
	}
	pub := k.Public().(ed25519.PublicKey)
	gotPub, err := ParseEd25519Public(FormatEd25519Public(pub))
	if err != nil {
		t.Fatalf("ParseEd25519Public(FormatEd25519Public(k)) error %v", err)
	}
	if !gotPub.Equal(pub) {
		t.Fatal("ParseEd25519Public(FormatEd25519Public(k)) is a different key")
	}
}

func TestEd25519ParseRejects(t *testing.T) {
	t.Parallel()
	k := newEd25519(t)
	priv := FormatEd25519Private(k)
	pub := FormatEd25519Public(k.Public().(ed25519.PublicKey))
	rsaKey := newKey(t)
	for name, tc := range map[string]struct {
		text    string
		private bool
	}{
		"empty":                     {"", true},
		"public as private":         {pub, true},
		"private as public":         {priv, false},
		"BOINC RSA text as private": {FormatPrivate(rsaKey), true},
		"BOINC RSA text as public":  {FormatPublic(&rsaKey.PublicKey), false},
		"text after the block":      {priv + "junk\n", true},
		"two blocks":                {pub + pub, false},
		"Ed448 algorithm":           {strings.Replace(priv, "BQYDK2Vw", "BQYDK2Vx", 1), true},
	} {
		var err error
		if tc.private {
			_, err = ParseEd25519Private(tc.text)
		} else {
			_, err = ParseEd25519Public(tc.text)
		}
		if !errors.Is(err, ErrBadKey) {
			t.Errorf("parse %s = %v, want ErrBadKey", name, err)
		}
	}
}

// TestEd25519ReadsOpenSSLKeys checks the documented promise that operators
// may make the key with openssl.
func TestEd25519ReadsOpenSSLKeys(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not on PATH")
	}
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "p"), filepath.Join(dir, "q")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", priv).CombinedOutput(); err != nil {
		t.Skipf("openssl cannot make ed25519 keys: %v: %s", err, out)
	}
	if out, err := exec.Command("openssl", "pkey", "-in", priv, "-pubout", "-out", pub).CombinedOutput(); err != nil {
		t.Fatalf("openssl pkey -pubout: %v: %s", err, out)
	}
	if err := os.Chmod(priv, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ReadEd25519PrivateFile(priv)
	if err != nil {
		t.Fatalf("ReadEd25519PrivateFile(openssl key) error %v", err)
	}
	p, err := ReadEd25519PublicFile(pub)
	if err != nil {
		t.Fatalf("ReadEd25519PublicFile(openssl key) error %v", err)
	}
	if !p.Equal(k.Public()) {
		t.Fatal("openssl's public key is not the private key's public half")
	}
}

func TestEd25519SignVerify(t *testing.T) {
	t.Parallel()
	k := newEd25519(t)
	pub := k.Public().(ed25519.PublicKey)
	data := []byte(UploadCertificate("wu_1_0_r0_out", 100000, 1700000000))
	sig := SignEd25519(k, data)
	lines := strings.Split(sig, "\n")
	if len(lines) != 4 || len(lines[0]) != 64 || len(lines[1]) != 64 || lines[2] != "." || lines[3] != "" {
		t.Fatalf("SignEd25519() = %q, want 2 lines of 64 hex characters, then \".\\n\"", sig)
	}
	if err := VerifyEd25519(pub, data, sig); err != nil {
		t.Fatalf("VerifyEd25519(SignEd25519(data)) = %v, want nil", err)
	}
	// The client strips the whitespace around the signature and the upload
	// header puts it back differently.
	if err := VerifyEd25519(pub, data, "\n"+strings.TrimSpace(sig)); err != nil {
		t.Fatalf("VerifyEd25519(re-spaced signature) = %v, want nil", err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	for name, tc := range map[string]struct {
		key  ed25519.PublicKey
		data []byte
		sig  string
	}{
		"other data":      {pub, []byte(UploadCertificate("wu_1_0_r0_out", 100001, 1700000000)), sig},
		"other name":      {pub, []byte(UploadCertificate("wu_1_0_r1_out", 100000, 1700000000)), sig},
		"other key":       {other, data, sig},
		"empty signature": {pub, data, ""},
		"truncated":       {pub, data, sig[:100]},
		"odd digits":      {pub, data, "abc"},
		"flipped digit":   {pub, data, flip(sig)},
		"short key":       {pub[:16], data, sig},
	} {
		if err := VerifyEd25519(tc.key, tc.data, tc.sig); !errors.Is(err, ErrBadSignature) {
			t.Errorf("VerifyEd25519(%s) = %v, want ErrBadSignature", name, err)
		}
	}
}

func TestUploadVerifier(t *testing.T) {
	t.Parallel()
	rsaKey := newKey(t)
	edKey := newEd25519(t)
	_, oldEd, _ := ed25519.GenerateKey(nil)
	_, strangerEd, _ := ed25519.GenerateKey(nil)
	stranger, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	cert := []byte(UploadCertificate("wu_7_0_r1_out", 65536, 1700000000))
	rsaSig, err := Sign(rsaKey, cert)
	if err != nil {
		t.Fatal(err)
	}
	strangerSig, err := Sign(stranger, cert)
	if err != nil {
		t.Fatal(err)
	}
	edSig := SignEd25519(edKey, cert)
	oldSig := SignEd25519(oldEd, cert)
	both := UploadVerifier{RSA: &rsaKey.PublicKey,
		Ed25519: []ed25519.PublicKey{edKey.Public().(ed25519.PublicKey), oldEd.Public().(ed25519.PublicKey)}}
	rsaOnly := UploadVerifier{RSA: &rsaKey.PublicKey}
	edOnly := UploadVerifier{Ed25519: []ed25519.PublicKey{edKey.Public().(ed25519.PublicKey)}}
	for _, tc := range []struct {
		name string
		v    UploadVerifier
		cert []byte
		sig  string
		ok   bool
	}{
		{"rsa signature, both keys", both, cert, rsaSig, true},
		{"ed25519 signature, both keys", both, cert, edSig, true},
		{"previous ed25519 key", both, cert, oldSig, true},
		{"rsa signature, rsa only", rsaOnly, cert, rsaSig, true},
		{"ed25519 signature, rsa only", rsaOnly, cert, edSig, false},
		{"rsa signature, ed25519 only", edOnly, cert, rsaSig, false},
		{"ed25519 signature, ed25519 only", edOnly, cert, edSig, true},
		{"retired ed25519 key", edOnly, cert, oldSig, false},
		{"stranger's rsa key", both, cert, strangerSig, false},
		{"stranger's ed25519 key", both, cert, SignEd25519(strangerEd, cert), false},
		{"tampered max_nbytes, ed25519", both, []byte(UploadCertificate("wu_7_0_r1_out", 1<<30, 1700000000)), edSig, false},
		{"tampered name, ed25519", both, []byte(UploadCertificate("wu_7_0_r2_out", 65536, 1700000000)), edSig, false},
		{"tampered max_nbytes, rsa", both, []byte(UploadCertificate("wu_7_0_r1_out", 1<<30, 1700000000)), rsaSig, false},
		{"flipped ed25519 digit", both, cert, flip(edSig), false},
		{"no key", UploadVerifier{}, cert, edSig, false},
		{"empty signature", both, cert, "", false},
		{"junk", both, cert, "zz", false},
	} {
		err := tc.v.Verify(tc.cert, tc.sig)
		if tc.ok && err != nil {
			t.Errorf("%s: Verify() = %v, want nil", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: Verify() = %v, want ErrBadSignature", tc.name, err)
		}
	}
	if !(UploadVerifier{}).Empty() || both.Empty() || edOnly.Empty() {
		t.Error("Empty() wrong")
	}
}

func TestEd25519Files(t *testing.T) {
	t.Parallel()
	k := newEd25519(t)
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, Ed25519PrivateFile), filepath.Join(dir, Ed25519PublicFile)
	if err := WriteEd25519PrivateFile(priv, k); err != nil {
		t.Fatalf("WriteEd25519PrivateFile() error %v", err)
	}
	if err := WriteEd25519PrivateFile(priv, k); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteEd25519PrivateFile(existing file) = %v, want fs.ErrExist", err)
	}
	for range 2 { // the second write replaces the first
		if err := WriteEd25519PublicFile(pub, k.Public().(ed25519.PublicKey)); err != nil {
			t.Fatalf("WriteEd25519PublicFile() error %v", err)
		}
	}
	for path, want := range map[string]fs.FileMode{priv: 0o600, pub: 0o644} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", filepath.Base(path), st.Mode().Perm(), want)
		}
	}
	got, err := ReadEd25519PrivateFile(priv)
	if err != nil || !got.Equal(k) {
		t.Fatalf("ReadEd25519PrivateFile() = %v, want the written key", err)
	}
	gotPub, err := ReadEd25519PublicFile(pub)
	if err != nil || !gotPub.Equal(k.Public()) {
		t.Fatalf("ReadEd25519PublicFile() = %v, want the written key", err)
	}
	for _, mode := range []fs.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(priv, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadEd25519PrivateFile(priv); !errors.Is(err, ErrInsecureFile) {
			t.Errorf("ReadEd25519PrivateFile(mode %04o) = %v, want ErrInsecureFile", mode, err)
		}
	}
	if _, err := ReadEd25519PrivateFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadEd25519PrivateFile(missing) = %v, want fs.ErrNotExist", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("key directory holds %d entries after writing, want the two key files", len(entries))
	}
}

// BenchmarkUploadCertificate measures what one sent output file costs the
// scheduler (sign) and the data server (verify), with each kind of key.
func BenchmarkUploadCertificate(b *testing.B) {
	rsaKey, err := sharedKey()
	if err != nil {
		b.Fatal(err)
	}
	edKey := newEd25519(b)
	cert := []byte(UploadCertificate("wu_123456_0_r1_out", 65536, 1700000000))
	rsaSig, err := Sign(rsaKey, cert)
	if err != nil {
		b.Fatal(err)
	}
	edSig := SignEd25519(edKey, cert)
	v := UploadVerifier{RSA: &rsaKey.PublicKey, Ed25519: []ed25519.PublicKey{edKey.Public().(ed25519.PublicKey)}}
	b.Run("sign/rsa1024", func(b *testing.B) {
		for b.Loop() {
			if _, err := Sign(rsaKey, cert); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sign/ed25519", func(b *testing.B) {
		for b.Loop() {
			SignEd25519(edKey, cert)
		}
	})
	b.Run("verify/rsa1024", func(b *testing.B) {
		for b.Loop() {
			if err := v.Verify(cert, rsaSig); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify/ed25519", func(b *testing.B) {
		for b.Loop() {
			if err := v.Verify(cert, edSig); err != nil {
				b.Fatal(err)
			}
		}
	})
}
