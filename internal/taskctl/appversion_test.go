package taskctl_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// checkVersion reads the app version numbered num and checks its files: as
// described, installed in the download directory with the right mode, and
// signed so that the code-signing public key verifies them.
func checkVersion(t *testing.T, b *bundle, num int, want map[string][]byte) {
	t.Helper()
	avs, err := b.st.AppVersionList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	found := false
	for _, v := range avs {
		if v.VersionNum == num {
			doc, found = v.XMLDoc, true
		}
	}
	if !found {
		t.Fatalf("AppVersionList = %+v: no version %d", avs, num)
	}
	ver, err := appversion.Parse(doc)
	files := ver.Files
	if err != nil || len(files) != len(want) {
		t.Fatalf("appversion.Parse(version %d xml_doc %q) = %+v, %v; want %d files", num, doc, files, err, len(want))
	}
	pub, err := keys.ReadPublicFile(filepath.Join(b.projectDir, "keys", "code_sign_public"))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		data, ok := want[f.Name]
		if !ok {
			t.Fatalf("version %d file %q: not one of the wanted names", num, f.Name)
		}
		if f.MainProgram != (i == 0) || (i > 0 && (!f.CopyFile || f.OpenName == "")) {
			t.Errorf("version %d file %d = %+v: want the first the main program, the others copied under an open name", num, i, f)
		}
		sum := md5.Sum(data)
		if f.MD5 != hex.EncodeToString(sum[:]) || f.Nbytes != float64(len(data)) {
			t.Errorf("version %d file %s: md5 %s nbytes %v, want %x %d", num, f.Name, f.MD5, f.Nbytes, sum, len(data))
		}
		path, err := fanout.Path(filepath.Join(b.projectDir, "download"), f.Name, 16)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(data) {
			t.Fatalf("installed %s = %q, %v; want the --file bytes", path, got, err)
		}
		if err := keys.Verify(pub, got, f.Signature); err != nil {
			t.Errorf("keys.Verify(code_sign_public, %s, stored signature) = %v", f.Name, err)
		}
		st, _ := os.Stat(path)
		if wantMode := os.FileMode(0o644); f.MainProgram {
			if st.Mode().Perm() != 0o755 {
				t.Errorf("main program %s mode %v, want 0755", path, st.Mode().Perm())
			}
		} else if st.Mode().Perm() != wantMode {
			t.Errorf("file %s mode %v, want %v", path, st.Mode().Perm(), wantMode)
		}
	}
}

func TestAppVersionFiles(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	// The code-signing private key is kept off the server.
	offline := t.TempDir()
	codeSignKey := filepath.Join(offline, "code_sign_private")
	b.mustRun(t, "keys", "generate", "--code-sign-out", offline)
	b.mustRun(t, "platform", "add", "--name", "x86_64-pc-linux-gnu")
	b.mustRun(t, "app", "add", "--name", "demo")

	src := t.TempDir()
	mainPath := filepath.Join(src, "demo_app")
	dataPath := filepath.Join(src, "data.txt")
	mainBytes := []byte("#!/bin/sh\necho demo\n")
	dataBytes := []byte("some data\n")
	for p, d := range map[string][]byte{mainPath: mainBytes, dataPath: dataBytes} {
		if err := os.WriteFile(p, d, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	add := func(num string, extra ...string) (string, string, error) {
		args := append([]string{"app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu",
			"--version-num", num, "--file", mainPath, "--file", dataPath}, extra...)
		return b.run(t, args...)
	}

	// Signed by the operator's tool given the key's path.
	if _, errOut, err := add("100", "--code-sign-key", codeSignKey); err != nil {
		t.Fatalf("app-version add --code-sign-key: %v (stderr %q)", err, errOut)
	}
	checkVersion(t, b, 100, map[string][]byte{
		"demo_100_x86_64-pc-linux-gnu":          mainBytes,
		"demo_100_x86_64-pc-linux-gnu_data.txt": dataBytes,
	})

	// Signed offline.
	sigs := b.mustRun(t, "sign", "--key", codeSignKey, mainPath, dataPath)
	sigPath := filepath.Join(src, "sigs.txt")
	if err := os.WriteFile(sigPath, []byte(sigs), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := add("101", "--signatures", sigPath); err != nil {
		t.Fatalf("app-version add --signatures: %v (stderr %q)", err, errOut)
	}
	checkVersion(t, b, 101, map[string][]byte{
		"demo_101_x86_64-pc-linux-gnu":          mainBytes,
		"demo_101_x86_64-pc-linux-gnu_data.txt": dataBytes,
	})

	// A file changed after signing, signatures from another key, no
	// signing at all, both ways at once: all refused, nothing installed.
	otherDir := t.TempDir()
	other, _ := keys.Generate()
	if err := keys.WritePrivateFile(filepath.Join(otherDir, "k"), other); err != nil {
		t.Fatal(err)
	}
	otherSigs := b.mustRun(t, "sign", "--key", filepath.Join(otherDir, "k"), mainPath, dataPath)
	otherSigPath := filepath.Join(src, "other.txt")
	if err := os.WriteFile(otherSigPath, []byte(otherSigs), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := add("102", "--signatures", otherSigPath); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("app-version add with another key's signatures = %v, want a signature mismatch", err)
	}
	if _, _, err := add("102"); err == nil || !strings.Contains(err.Error(), "--code-sign-key or --signatures") {
		t.Errorf("app-version add --file without signing = %v, want an error naming the two ways", err)
	}
	if _, _, err := add("102", "--signatures", sigPath, "--code-sign-key", codeSignKey); err == nil {
		t.Error("app-version add with --signatures and --code-sign-key succeeded, want an error")
	}
	if err := os.WriteFile(dataPath, []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := add("102", "--signatures", sigPath); err == nil || !strings.Contains(err.Error(), "md5") {
		t.Errorf("app-version add of a file changed since signing = %v, want an md5 mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(b.projectDir, "download", fanout.Dir("demo_102_x86_64-pc-linux-gnu", 16),
		"demo_102_x86_64-pc-linux-gnu")); err == nil {
		t.Error("a refused version's main program was installed")
	}
	avs, err := b.st.AppVersionList(context.Background())
	if err != nil || len(avs) != 2 {
		t.Errorf("AppVersionList = %d versions, %v; want only 100 and 101", len(avs), err)
	}
}

func TestKeysRotate(t *testing.T) {
	b := setup(t, "")
	// Rotation runs where the private key is, off the server; the
	// operator then copies code_sign_public and the signature to it.
	dir := t.TempDir()
	b.mustRun(t, "keys", "generate", "--pair", "code_sign", "--code-sign-out", dir)
	oldPub, err := keys.ReadPublicFile(filepath.Join(dir, "code_sign_public"))
	if err != nil {
		t.Fatalf("after keys generate: %v", err)
	}
	if _, errOut, err := b.run(t, "keys", "rotate", "--dir", dir); err != nil {
		t.Fatalf("keys rotate: %v (stderr %q)", err, errOut)
	}
	newPub, err := keys.ReadPublicFile(filepath.Join(dir, "code_sign_public"))
	if err != nil || newPub.Equal(oldPub) {
		t.Fatalf("code_sign_public after rotate = %v, want a new key", err)
	}
	newPriv, err := keys.ReadPrivateFile(filepath.Join(dir, "code_sign_private"))
	if err != nil || !newPriv.PublicKey.Equal(newPub) {
		t.Fatalf("code_sign_private after rotate: %v, or it is not the new public key's pair", err)
	}
	sig, err := os.ReadFile(filepath.Join(dir, keys.RotationSignatureFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.VerifyRotation(oldPub, keys.FormatPublic(newPub), string(sig)); err != nil {
		t.Errorf("keys.VerifyRotation(old public, new key text, %s) = %v", keys.RotationSignatureFile, err)
	}
	suffix := "." + "1700000000" + ".old"
	if kept, err := keys.ReadPublicFile(filepath.Join(dir, "code_sign_public"+suffix)); err != nil || !kept.Equal(oldPub) {
		t.Errorf("old public key kept as code_sign_public%s: %v", suffix, err)
	}
	if _, _, err := b.run(t, "keys", "rotate", "--dir", dir); err == nil {
		t.Error("a second rotate in the same second succeeded, want a refusal to overwrite the kept files")
	}
}

// versionDoc reads the xml_doc of the app version numbered num.
func versionDoc(t *testing.T, b *bundle, num int) (appversion.Version, bool) {
	t.Helper()
	avs, err := b.st.AppVersionList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range avs {
		if v.VersionNum == num {
			doc, err := appversion.Parse(v.XMLDoc)
			if err != nil {
				t.Fatalf("version %d xml_doc %q: %v", num, v.XMLDoc, err)
			}
			return doc, true
		}
	}
	return appversion.Version{}, false
}

// TestAppVersionCmdline: app-version add --cmdline stores the version's
// command-line arguments with its files (the scheduler sends them as the
// <app_version>'s <cmdline>), also for a version without files; one the
// client would cut or split is refused and nothing is added.
func TestAppVersionCmdline(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	offline := t.TempDir()
	b.mustRun(t, "keys", "generate", "--code-sign-out", offline)
	b.mustRun(t, "platform", "add", "--name", "x86_64-pc-linux-gnu")
	b.mustRun(t, "app", "add", "--name", "demo")
	mainPath := filepath.Join(t.TempDir(), "demo_app")
	if err := os.WriteFile(mainPath, []byte("#!/bin/sh\necho demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu"}

	b.mustRun(t, append(base, "--version-num", "100", "--file", mainPath,
		"--code-sign-key", filepath.Join(offline, "code_sign_private"), "--cmdline", "--mode fast --db 'a b'")...)
	if v, ok := versionDoc(t, b, 100); !ok || v.Cmdline != "--mode fast --db 'a b'" || len(v.Files) != 1 || !v.Files[0].MainProgram {
		t.Errorf("version 100 = %+v (found %v), want cmdline %q and its main program", v, ok, "--mode fast --db 'a b'")
	}
	b.mustRun(t, append(base, "--version-num", "101", "--cmdline", "--sim")...)
	if v, ok := versionDoc(t, b, 101); !ok || v.Cmdline != "--sim" || len(v.Files) != 0 {
		t.Errorf("version 101 = %+v (found %v), want cmdline --sim and no files", v, ok)
	}
	for _, bad := range []string{strings.Repeat("x", appversion.MaxCmdline+1), "a\nb"} {
		if _, _, err := b.run(t, append(base, "--version-num", "102", "--cmdline", bad)...); err == nil || !strings.Contains(err.Error(), "--cmdline") {
			t.Errorf("app-version add --cmdline %q = %v, want an error naming --cmdline", bad, err)
		}
	}
	if _, ok := versionDoc(t, b, 102); ok {
		t.Error("a version with a refused --cmdline was added")
	}
}
