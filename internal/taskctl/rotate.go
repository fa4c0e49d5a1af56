package taskctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// rotateCommand replaces the code-signing key pair so that clients holding
// the old public key accept the new one: the new public key text is signed
// with the old private key into keys.RotationSignatureFile, which the
// scheduler sends with the new key to every client whose key differs. With
// --pair upload_ed25519 it replaces the upload certificate key instead.
func (t *tool) rotateCommand() *cli.Command {
	return &cli.Command{
		Name: "rotate",
		Usage: "replace the code_sign key pair, signing the new public key with the old private key (" +
			keys.RotationSignatureFile + "); the old files are kept with a .<unix time>.old suffix. " +
			"Run it where the private key is kept (--dir, off the server: see keys generate --code-sign-out), copy the new " +
			"code_sign_public and " + keys.RotationSignatureFile + " into the server's keys directory, " +
			"then restart the scheduler and add new app versions signed with the new key. " +
			"With --pair " + ed25519Pair + ": replace the upload certificate key (the old files are kept the same way)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "keys", Usage: "directory of the key files (relative to the project directory)"},
			&cli.StringFlag{Name: "pair", Value: "code_sign", Usage: "the pair to replace: code_sign or " + ed25519Pair},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			if err != nil {
				return err
			}
			dir := cfg.Path(c.String("dir"))
			switch pair := c.String("pair"); pair {
			case "code_sign":
			case ed25519Pair:
				return t.rotateUploadCert(dir)
			default:
				return fmt.Errorf("--pair %q: want code_sign or %s", pair, ed25519Pair)
			}
			privPath := filepath.Join(dir, "code_sign_private")
			pubPath := filepath.Join(dir, "code_sign_public")
			sigPath := filepath.Join(dir, keys.RotationSignatureFile)
			old, err := keys.ReadPrivateFile(privPath)
			if err != nil {
				return fmt.Errorf("rotate needs the current key: %w", err)
			}
			k, err := keys.Generate()
			if err != nil {
				return err
			}
			sig, err := keys.SignRotation(old, &k.PublicKey)
			if err != nil {
				return err
			}
			suffix := "." + strconv.FormatInt(t.now().Unix(), 10) + ".old"
			for _, p := range []string{privPath, pubPath, sigPath} {
				if _, err := os.Stat(p + suffix); err == nil {
					return fmt.Errorf("rotate: %s exists; wait a second and retry", p+suffix)
				}
			}
			// Until the new public file is written the scheduler keeps
			// sending the old key, which still matches the old signatures;
			// the public key goes last so it is never sent unsigned.
			for _, p := range []string{privPath, pubPath, sigPath} {
				if err := os.Rename(p, p+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("rotate: keep old key file: %w", err)
				}
			}
			if err := keys.WritePrivateFile(privPath, k); err != nil {
				return err
			}
			if err := writeNew(sigPath, []byte(sig), 0o644); err != nil {
				return fmt.Errorf("rotate: write %s: %w", sigPath, err)
			}
			if err := keys.WritePublicFile(pubPath, &k.PublicKey); err != nil {
				return err
			}
			t.printf("wrote %s, %s and %s; old files end in %s\n", privPath, pubPath, sigPath, suffix)
			t.notef("restart the scheduler to send the new key; app versions signed with the old key fail on clients that take the new one: add new versions signed with %s\n", privPath)
			return nil
		},
	}
}

// rotateUploadCert replaces the Ed25519 upload certificate key pair. Tasks
// sent before carry certificates of the old key: the scheduler accepts
// their uploads only if told to (--upload-cert-accept with the old public
// file), which an operator does for a routine rotation and not for a key
// that leaked. The scheduler reads its keys at start, so nothing changes
// until it restarts.
func (t *tool) rotateUploadCert(dir string) error {
	priv := filepath.Join(dir, ed25519Pair+"_private")
	pub := filepath.Join(dir, ed25519Pair+"_public")
	if _, err := keys.ReadEd25519PrivateFile(priv); err != nil {
		return fmt.Errorf("rotate needs the current key (create one with keys generate --pair %s): %w", ed25519Pair, err)
	}
	suffix := "." + strconv.FormatInt(t.now().Unix(), 10) + ".old"
	for _, p := range []string{priv, pub} {
		if _, err := os.Stat(p + suffix); err == nil {
			return fmt.Errorf("rotate: %s exists; wait a second and retry", p+suffix)
		}
	}
	for _, p := range []string{priv, pub} {
		if err := os.Rename(p, p+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate: keep old key file: %w", err)
		}
	}
	if err := newPair(dir, ed25519Pair); err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	t.printf("wrote %s and %s; old files end in %s\n", priv, pub, suffix)
	t.notef("restart the scheduler to sign with the new key; add --upload-cert-accept %s until the tasks sent before now are past their deadlines (leave it out if the old key leaked)\n", pub+suffix)
	return nil
}
