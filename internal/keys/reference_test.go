package keys

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// referenceScript is the Python reference of the key format and signature
// scheme that the real client's accepted signatures were made with. It lives
// in the project's shared protocol notes, beside this repository.
const referenceScript = "../../../shared/protocol/reference/boinc_keys.py"

// python runs code with the reference module importable and returns its
// standard output, skipping the test when the reference or its Python
// dependency is not available here.
func python(t *testing.T, code string, args ...string) string {
	t.Helper()
	ref, err := filepath.Abs(referenceScript)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ref); err != nil {
		t.Skipf("reference %s not present: %v", referenceScript, err)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	if err := exec.Command(py, "-c", "import cryptography").Run(); err != nil {
		t.Skip("python3 lacks the cryptography module the reference imports")
	}
	prelude := "import sys; sys.path.insert(0, " + `"` + filepath.Dir(ref) + `"` + "); import boinc_keys as bk\n"
	cmd := exec.Command(py, append([]string{"-c", prelude + code}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("python reference: %v\n%s", err, stderr)
	}
	return string(out)
}

// TestSignaturesMatchThePythonReference checks both directions: a key made
// here is read by the reference and signs byte for byte as we do, and a key
// made by the reference is read here and signs as the reference does.
func TestSignaturesMatchThePythonReference(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	text := "<name>wu_1_0_0</name><max_nbytes>65536</max_nbytes>"

	// Our key, the reference's signature.
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	privPath := filepath.Join(dir, "go_private")
	if err := os.WriteFile(privPath, []byte(FormatPrivate(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := python(t, `
k = bk.Key.from_text(open(sys.argv[1]).read())
sys.stdout.write(k.public_text() + "\n=====\n" + k.sign_text(sys.argv[2]))
`, privPath, text)
	pyPublic, pySig, ok := strings.Cut(out, "\n=====\n")
	if !ok {
		t.Fatalf("unexpected reference output %q", out)
	}
	if strings.TrimSpace(pyPublic) != strings.TrimSpace(FormatPublic(&k.PublicKey)) {
		t.Errorf("public key text differs:\nreference:\n%s\nours:\n%s", pyPublic, FormatPublic(&k.PublicKey))
	}
	ours, err := Sign(k, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(pySig) != strings.TrimSpace(ours) {
		t.Errorf("signature of our key differs:\nreference:\n%s\nours:\n%s", pySig, ours)
	}

	// The reference's key, our signature and verification.
	refDir := filepath.Join(dir, "ref")
	out = python(t, `
ks = bk.load_or_create(sys.argv[1])
sys.stdout.write(ks["upload"].sign_text(sys.argv[2]))
`, refDir, text)
	raw, err := os.ReadFile(filepath.Join(refDir, "upload_private"))
	if err != nil {
		t.Fatal(err)
	}
	rk, err := ParsePrivate(string(raw))
	if err != nil {
		t.Fatalf("ParsePrivate(reference key): %v", err)
	}
	pubRaw, err := os.ReadFile(filepath.Join(refDir, "upload_public"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublic(string(pubRaw))
	if err != nil {
		t.Fatalf("ParsePublic(reference key): %v", err)
	}
	if err := Verify(pub, []byte(text), out); err != nil {
		t.Errorf("Verify(reference signature) = %v", err)
	}
	ours, err = Sign(rk, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != strings.TrimSpace(ours) {
		t.Errorf("signature with the reference's key differs:\nreference:\n%s\nours:\n%s", out, ours)
	}
}
