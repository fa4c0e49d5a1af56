package main

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// keyDir writes the requested key files into dir/keys.
func keyDir(t *testing.T, withRSA, withEd bool) (dir string, ed ed25519.PrivateKey) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if withRSA {
		k, err := keys.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if err := keys.WritePrivateFile(filepath.Join(dir, "keys", "upload_private"), k); err != nil {
			t.Fatal(err)
		}
	}
	if withEd {
		var err error
		if ed, err = keys.GenerateEd25519(); err != nil {
			t.Fatal(err)
		}
		if err := keys.WriteEd25519PrivateFile(filepath.Join(dir, "keys", keys.Ed25519PrivateFile), ed); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ed
}

// readKeys parses args as the command does and reads the upload keys.
func readKeys(t *testing.T, dir string, args ...string) (uploadKeys, error) {
	t.Helper()
	var k uploadKeys
	var kerr error
	app := &cli.App{Name: program, Flags: flags(), Action: func(c *cli.Context) error {
		k, kerr = readUploadKeys(c, config.Common{ProjectDir: dir})
		return nil
	}}
	if err := app.Run(append([]string{program}, args...)); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return k, kerr
}

// TestReadUploadKeys runs one case at a time: urfave/cli's help flag is
// global and races between parallel apps.
func TestReadUploadKeys(t *testing.T) {
	t.Run("RSA only: signs with RSA", func(t *testing.T) {
		dir, _ := keyDir(t, true, false)
		k, err := readKeys(t, dir)
		if err != nil || k.rsa == nil || k.ed != nil || len(k.accept) != 0 || k.signer() != "rsa" {
			t.Fatalf("readUploadKeys = %+v, %v; want the RSA key alone", k, err)
		}
	})
	t.Run("both: Ed25519 signs, both accepted", func(t *testing.T) {
		dir, ed := keyDir(t, true, true)
		k, err := readKeys(t, dir)
		if err != nil || k.rsa == nil || !k.ed.Equal(ed) || len(k.accept) != 1 || !k.accept[0].Equal(ed.Public()) || k.signer() != "ed25519" {
			t.Fatalf("readUploadKeys = %+v, %v; want both keys, Ed25519 signing", k, err)
		}
	})
	t.Run("Ed25519 only: the default RSA file may be missing", func(t *testing.T) {
		dir, _ := keyDir(t, false, true)
		k, err := readKeys(t, dir)
		if err != nil || k.rsa != nil || k.ed == nil || k.rsaPublic() != nil {
			t.Fatalf("readUploadKeys = %+v, %v; want the Ed25519 key alone", k, err)
		}
	})
	t.Run("no key: the RSA key, as before, is missing", func(t *testing.T) {
		dir, _ := keyDir(t, false, false)
		if _, err := readKeys(t, dir); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "--upload-key") {
			t.Fatalf("readUploadKeys = %v, want --upload-key missing", err)
		}
		if _, err := readKeys(t, dir, "--upload-key", ""); err == nil || !strings.Contains(err.Error(), "no upload key") {
			t.Fatalf("readUploadKeys(--upload-key \"\") = %v, want no upload key", err)
		}
	})
	t.Run("Ed25519 key named but missing", func(t *testing.T) {
		dir, _ := keyDir(t, true, false)
		if _, err := readKeys(t, dir, "--upload-cert-key", "keys/other"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("readUploadKeys = %v, want a missing file", err)
		}
	})
	t.Run("RSA key named but missing", func(t *testing.T) {
		dir, _ := keyDir(t, false, true)
		if _, err := readKeys(t, dir, "--upload-key", "keys/upload_private"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("readUploadKeys = %v, want a missing file", err)
		}
	})
	t.Run("Ed25519 turned off", func(t *testing.T) {
		dir, _ := keyDir(t, true, true)
		k, err := readKeys(t, dir, "--upload-cert-key", "")
		if err != nil || k.ed != nil || k.rsa == nil {
			t.Fatalf("readUploadKeys = %+v, %v; want RSA only", k, err)
		}
	})
	t.Run("readable Ed25519 private key refused", func(t *testing.T) {
		dir, _ := keyDir(t, true, true)
		if err := os.Chmod(filepath.Join(dir, "keys", keys.Ed25519PrivateFile), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeys(t, dir); !errors.Is(err, keys.ErrInsecureFile) {
			t.Fatalf("readUploadKeys = %v, want ErrInsecureFile", err)
		}
	})
	t.Run("retired key still accepted", func(t *testing.T) {
		dir, ed := keyDir(t, false, true)
		old, err := keys.GenerateEd25519()
		if err != nil {
			t.Fatal(err)
		}
		if err := keys.WriteEd25519PublicFile(filepath.Join(dir, "keys", "old_public"), old.Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
		k, err := readKeys(t, dir, "--upload-cert-accept", "keys/old_public")
		if err != nil || len(k.accept) != 2 || !k.accept[0].Equal(ed.Public()) || !k.accept[1].Equal(old.Public()) {
			t.Fatalf("readUploadKeys = %+v, %v; want the current and the retired key accepted", k, err)
		}
		if _, err := readKeys(t, dir, "--upload-cert-accept", "keys/missing"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("readUploadKeys(missing accepted key) = %v, want a missing file", err)
		}
	})
}
