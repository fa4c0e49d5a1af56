package taskctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/keys"
)

// TestKeysGenerateEd25519: a new project gets the Ed25519 upload
// certificate pair beside the RSA ones; an existing one adds it alone.
func TestKeysGenerateEd25519(t *testing.T) {
	b := setup(t, "")
	out := b.mustRun(t, "keys", "generate")
	dir := filepath.Join(b.projectDir, "keys")
	priv, pub := filepath.Join(dir, keys.Ed25519PrivateFile), filepath.Join(dir, keys.Ed25519PublicFile)
	if !strings.Contains(out, priv) {
		t.Errorf("keys generate output %q does not name %s", out, priv)
	}
	k, err := keys.ReadEd25519PrivateFile(priv)
	if err != nil {
		t.Fatalf("ReadEd25519PrivateFile after keys generate: %v", err)
	}
	if p, err := keys.ReadEd25519PublicFile(pub); err != nil || !p.Equal(k.Public()) {
		t.Fatalf("%s = %v; want the private key's public half", keys.Ed25519PublicFile, err)
	}

	// An existing project: RSA keys only, then --pair adds the Ed25519 one
	// and leaves the others alone.
	for _, f := range []string{priv, pub} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	rsaBefore, _ := os.ReadFile(filepath.Join(dir, "upload_private"))
	b.mustRun(t, "keys", "generate", "--pair", "upload_ed25519")
	if _, err := keys.ReadEd25519PrivateFile(priv); err != nil {
		t.Fatalf("keys generate --pair upload_ed25519: %v", err)
	}
	if rsaAfter, _ := os.ReadFile(filepath.Join(dir, "upload_private")); string(rsaAfter) != string(rsaBefore) {
		t.Fatal("keys generate --pair upload_ed25519 changed the RSA upload key")
	}
	if _, _, err := b.run(t, "keys", "generate", "--pair", "upload_ed25519"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second keys generate --pair = %v, want a refusal naming --force", err)
	}
	if _, _, err := b.run(t, "keys", "generate", "--pair", "nonsense"); err == nil {
		t.Fatal("keys generate --pair nonsense succeeded")
	}
}

func TestKeysRotateEd25519(t *testing.T) {
	b := setup(t, "")
	dir := filepath.Join(b.projectDir, "keys")
	if _, _, err := b.run(t, "keys", "rotate", "--pair", "upload_ed25519"); err == nil {
		t.Fatal("rotate without a current key succeeded")
	}
	b.mustRun(t, "keys", "generate")
	old, err := keys.ReadEd25519PrivateFile(filepath.Join(dir, keys.Ed25519PrivateFile))
	if err != nil {
		t.Fatal(err)
	}
	codeSign, _ := os.ReadFile(filepath.Join(dir, "code_sign_public"))
	_, errOut, err := b.run(t, "keys", "rotate", "--pair", "upload_ed25519")
	if err != nil {
		t.Fatalf("keys rotate --pair upload_ed25519: %v (stderr %q)", err, errOut)
	}
	suffix := ".1700000000.old"
	if !strings.Contains(errOut, "--upload-cert-accept "+filepath.Join(dir, keys.Ed25519PublicFile+suffix)) {
		t.Errorf("rotate note %q does not say how to keep accepting the old key", errOut)
	}
	k, err := keys.ReadEd25519PrivateFile(filepath.Join(dir, keys.Ed25519PrivateFile))
	if err != nil || k.Equal(old) {
		t.Fatalf("%s after rotate: %v, or the same key", keys.Ed25519PrivateFile, err)
	}
	if p, err := keys.ReadEd25519PublicFile(filepath.Join(dir, keys.Ed25519PublicFile)); err != nil || !p.Equal(k.Public()) {
		t.Fatalf("%s after rotate: %v, or not the new key's half", keys.Ed25519PublicFile, err)
	}
	if kept, err := keys.ReadEd25519PublicFile(filepath.Join(dir, keys.Ed25519PublicFile+suffix)); err != nil || !kept.Equal(old.Public()) {
		t.Errorf("old public key kept as %s%s: %v", keys.Ed25519PublicFile, suffix, err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "code_sign_public")); string(now) != string(codeSign) {
		t.Error("rotating the upload certificate key changed the code_sign key")
	}
	if _, _, err := b.run(t, "keys", "rotate", "--pair", "upload_ed25519"); err == nil {
		t.Error("a second rotate in the same second succeeded, want a refusal to overwrite the kept files")
	}
}
