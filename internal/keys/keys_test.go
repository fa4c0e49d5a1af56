package keys

import (
	"crypto/md5"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

const samples = "../protocol/testdata/samples"

// sharedKey is generated once: key generation is the slow part of these
// tests.
var sharedKey = sync.OnceValues(Generate)

func newKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := sharedKey()
	if err != nil {
		t.Fatalf("Generate() error %v", err)
	}
	return k
}

func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samples, name))
	if err != nil {
		t.Skipf("protocol sample not available: %v", err)
	}
	return string(b)
}

func TestGenerateMakesBOINCSizedKey(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	if k.N.BitLen() != 1024 || k.E != 65537 {
		t.Fatalf("Generate() = %d-bit key with e=%d, want 1024 bits and e=65537", k.N.BitLen(), k.E)
	}
}

func TestPrivateRoundTrip(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	text := FormatPrivate(k)
	checkShape(t, text, 22)
	got, err := ParsePrivate(text)
	if err != nil {
		t.Fatalf("ParsePrivate(FormatPrivate(k)) error %v", err)
	}
	if !got.Equal(k) {
		t.Fatal("ParsePrivate(FormatPrivate(k)) is a different key")
	}
	if again := FormatPrivate(got); again != text {
		t.Fatalf("FormatPrivate after a round trip changed:\n%s\nwant\n%s", again, text)
	}
}

func TestPublicRoundTrip(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	text := FormatPublic(&k.PublicKey)
	checkShape(t, text, 8)
	got, err := ParsePublic(text)
	if err != nil {
		t.Fatalf("ParsePublic(FormatPublic(k)) error %v", err)
	}
	if !got.Equal(&k.PublicKey) {
		t.Fatal("ParsePublic(FormatPublic(k)) is a different key")
	}
}

// checkShape checks the layout the client's reader expects.
func checkShape(t *testing.T, text string, hexLines int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != hexLines+2 || lines[0] != "1024" || lines[len(lines)-1] != "." {
		t.Fatalf("key text has %d lines, first %q, last %q; want %d lines, \"1024\" ... \".\"",
			len(lines), lines[0], lines[len(lines)-1], hexLines+2)
	}
	hexLine := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, l := range lines[1 : len(lines)-1] {
		if !hexLine.MatchString(l) {
			t.Fatalf("key text line %d = %q, want 64 lower-case hex characters", i+2, l)
		}
	}
}

func TestParsePublicSample(t *testing.T) {
	t.Parallel()
	text := readSample(t, "26_code_sign_public_key_boinc_format.txt")
	k, err := ParsePublic(text)
	if err != nil {
		t.Fatalf("ParsePublic(sample 26) error %v", err)
	}
	if k.E != 65537 || k.N.BitLen() != 1024 {
		t.Fatalf("ParsePublic(sample 26) = %d-bit key, e=%d; want 1024 bits, e=65537", k.N.BitLen(), k.E)
	}
	if !strings.HasPrefix(hex.EncodeToString(k.N.Bytes()), "ce060d228b04febb") {
		t.Fatalf("ParsePublic(sample 26) modulus starts %x, want ce060d228b04febb", k.N.Bytes()[:8])
	}
	if got := FormatPublic(k); got != text {
		t.Fatalf("FormatPublic(ParsePublic(sample 26)) =\n%s\nwant the sample byte for byte:\n%s", got, text)
	}
}

// sampleApp is the app file the reference server signed in run1; its md5
// is the one in sample 03, so the file_signature there covers these bytes.
const sampleApp = "#!/bin/sh\n" +
	"# trivial BOINC 'app': no BOINC API; uses copied files\n" +
	"echo \"app started in $(pwd) args: $*\" 1>&2\n" +
	"tr a-z A-Z < in > out\n" +
	"echo done >> out\n" +
	"echo 0 > boinc_finish_called\n" +
	"exit 0\n"

// TestVerifySignatureTheClientAccepted checks Verify against a signature the
// real client accepted (sample 03) with the key it was given (sample 26).
func TestVerifySignatureTheClientAccepted(t *testing.T) {
	t.Parallel()
	pub, err := ParsePublic(readSample(t, "26_code_sign_public_key_boinc_format.txt"))
	if err != nil {
		t.Fatalf("ParsePublic(sample 26) error %v", err)
	}
	reply := readSample(t, "03_scheduler_reply_with_work_signed.xml")
	m := regexp.MustCompile(`(?s)<file_signature>(.*?)</file_signature>`).FindStringSubmatch(reply)
	if m == nil {
		t.Fatal("sample 03 has no <file_signature>")
	}
	sum := md5.Sum([]byte(sampleApp))
	if got := hex.EncodeToString(sum[:]); got != "0d749965cfe1604be63d2ee76d01585a" {
		t.Fatalf("md5 of the reconstructed app = %s, want sample 03's 0d749965cfe1604be63d2ee76d01585a", got)
	}
	if err := Verify(pub, []byte(sampleApp), m[1]); err != nil {
		t.Fatalf("Verify(sample 26 key, app, sample 03 signature) = %v, want nil", err)
	}
	if err := Verify(pub, []byte(sampleApp+" "), m[1]); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify(changed app) = %v, want ErrBadSignature", err)
	}
}

func TestSignVerify(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	data := []byte(UploadCertificate("wu_1_0_r0_out", 100000, 1700000000))
	sig, err := Sign(k, data)
	if err != nil {
		t.Fatalf("Sign() error %v", err)
	}
	checkSigShape(t, sig)
	if err := Verify(&k.PublicKey, data, sig); err != nil {
		t.Fatalf("Verify(Sign(data)) = %v, want nil", err)
	}
	// The client copies the certificate with its own whitespace (sample 07:
	// no newline after "."); that must not matter.
	if err := Verify(&k.PublicKey, data, "\n"+strings.TrimSuffix(sig, "\n")); err != nil {
		t.Fatalf("Verify(re-spaced signature) = %v, want nil", err)
	}
	other := []byte(UploadCertificate("wu_1_0_r0_out", 100001, 1700000000))
	for name, tc := range map[string]struct {
		data []byte
		sig  string
	}{
		"other data":      {other, sig},
		"empty signature": {data, ""},
		"truncated":       {data, sig[:100]},
		"odd digits":      {data, "abc"},
		"flipped digit":   {data, flip(sig)},
	} {
		if err := Verify(&k.PublicKey, tc.data, tc.sig); !errors.Is(err, ErrBadSignature) {
			t.Errorf("Verify(%s) = %v, want ErrBadSignature", name, err)
		}
	}
}

func checkSigShape(t *testing.T, sig string) {
	t.Helper()
	lines := strings.Split(sig, "\n")
	if len(lines) != 6 || lines[4] != "." || lines[5] != "" || len(lines[0]) != 64 {
		t.Fatalf("Sign() = %q, want 4 lines of 64 hex characters, then \".\\n\"", sig)
	}
}

func flip(sig string) string {
	b := []byte(sig)
	if b[10] == '0' {
		b[10] = '1'
	} else {
		b[10] = '0'
	}
	return string(b)
}

func TestUploadCertificate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		max     float64
		expires int64
		want    string
	}{
		{"a_0", 100000, 1700000000, "<name>a_0</name><max_nbytes>100000</max_nbytes><expires>1700000000</expires>"},
		{"big", 1e12, 1, "<name>big</name><max_nbytes>1000000000000</max_nbytes><expires>1</expires>"},
		{"zero", 0, 2, "<name>zero</name><max_nbytes>0</max_nbytes><expires>2</expires>"},
	} {
		if got := UploadCertificate(tc.name, tc.max, tc.expires); got != tc.want {
			t.Errorf("UploadCertificate(%q, %v, %d) = %q, want %q", tc.name, tc.max, tc.expires, got, tc.want)
		}
	}
}

// TestUploadSignatureExpiry: the expiry rides after the signature in the
// <xml_signature> text, survives the client's whitespace stripping, and
// does not disturb the signature's check; a text without one has none.
func TestUploadSignatureExpiry(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	cert := []byte(UploadCertificate("wu_1_0_r0_out", 100000, 1700000000))
	sig, err := Sign(k, cert)
	if err != nil {
		t.Fatal(err)
	}
	text := UploadSignature(sig, 1700000000)
	if strings.ContainsAny(text, "<>&") {
		t.Fatalf("UploadSignature text %q holds characters XML escapes", text)
	}
	stripped := strings.TrimSpace(text) // as FILE_INFO::parse stores it
	if got, err := UploadExpiry(stripped); err != nil || got != 1700000000 {
		t.Fatalf("UploadExpiry(%q) = %d, %v; want 1700000000", stripped, got, err)
	}
	if err := Verify(&k.PublicKey, cert, stripped); err != nil {
		t.Fatalf("signature with the expiry line does not verify: %v", err)
	}
	// The expiry is signed: moved later, the certificate no longer verifies.
	if err := Verify(&k.PublicKey, []byte(UploadCertificate("wu_1_0_r0_out", 100000, 1700000001)), stripped); err == nil {
		t.Fatal("signature verifies a certificate with another expiry")
	}
	for _, bad := range []string{sig, strings.TrimSpace(sig), "", "abc", sig + "expires x\n", sig + "expires -5\n", sig + "other 5\n"} {
		if _, err := UploadExpiry(bad); !errors.Is(err, ErrNoExpiry) {
			t.Errorf("UploadExpiry(%q) error %v, want ErrNoExpiry", bad, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	pub := FormatPublic(&k.PublicKey)
	priv := FormatPrivate(k)
	evenE := strings.Replace(pub, "0000000000000000000000000000000000000000000000000000000000010001",
		"0000000000000000000000000000000000000000000000000000000000010000", 1)
	for name, text := range map[string]string{
		"empty":           "",
		"no body":         "1024",
		"bits too large":  strings.Replace(pub, "1024", "2048", 1),
		"bits not number": strings.Replace(pub, "1024", "x", 1),
		"short body":      pub[:200] + "\n.\n",
		"private as pub":  priv,
		"even exponent":   evenE,
	} {
		if _, err := ParsePublic(text); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParsePublic(%s) = %v, want ErrBadKey", name, err)
		}
	}
	for name, text := range map[string]string{
		"empty":         "",
		"public":        pub,
		"short body":    priv[:600] + "\n.\n",
		"wrong d":       corruptPrivateD(priv),
		"bits too high": strings.Replace(priv, "1024", "4096", 1),
	} {
		if _, err := ParsePrivate(text); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParsePrivate(%s) = %v, want ErrBadKey", name, err)
		}
	}
}

// corruptPrivateD changes one digit of the private exponent (line 10).
func corruptPrivateD(text string) string {
	lines := strings.Split(text, "\n")
	b := []byte(lines[10])
	if b[63] == '1' {
		b[63] = '3'
	} else {
		b[63] = '1'
	}
	lines[10] = string(b)
	return strings.Join(lines, "\n")
}

func TestPrivateFile(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	path := filepath.Join(t.TempDir(), "upload_private")
	if err := WritePrivateFile(path, k); err != nil {
		t.Fatalf("WritePrivateFile() error %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("WritePrivateFile() made mode %04o, want 0600", st.Mode().Perm())
	}
	got, err := ReadPrivateFile(path)
	if err != nil {
		t.Fatalf("ReadPrivateFile() error %v", err)
	}
	if !got.Equal(k) {
		t.Fatal("ReadPrivateFile() returned a different key")
	}
	if err := WritePrivateFile(path, k); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WritePrivateFile(existing file) = %v, want fs.ErrExist", err)
	}
	for _, mode := range []fs.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPrivateFile(path); !errors.Is(err, ErrInsecureFile) {
			t.Errorf("ReadPrivateFile(mode %04o) = %v, want ErrInsecureFile", mode, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("key directory holds %d entries after writing, want only the key file", len(entries))
	}
}

func TestPublicFile(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	path := filepath.Join(t.TempDir(), "upload_public")
	for range 2 { // the second write replaces the first
		if err := WritePublicFile(path, &k.PublicKey); err != nil {
			t.Fatalf("WritePublicFile() error %v", err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("WritePublicFile() made mode %04o, want 0644", st.Mode().Perm())
	}
	got, err := ReadPublicFile(path)
	if err != nil {
		t.Fatalf("ReadPublicFile() error %v", err)
	}
	if !got.Equal(&k.PublicKey) {
		t.Fatal("ReadPublicFile() returned a different key")
	}
	if _, err := ReadPublicFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadPublicFile(missing) = %v, want fs.ErrNotExist", err)
	}
}

func FuzzParsePublic(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(samples, "26_code_sign_public_key_boinc_format.txt")); err == nil {
		f.Add(string(b))
	}
	f.Add("1024\nabc\n.\n")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := ParsePublic(text)
		if err != nil {
			return
		}
		if _, err := ParsePublic(FormatPublic(k)); err != nil {
			t.Fatalf("ParsePublic(FormatPublic(ParsePublic(%q))) error %v", text, err)
		}
	})
}
