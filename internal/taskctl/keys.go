package taskctl

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// keyPairs are the project's key pairs, by their files' prefixes: upload
// (BOINC's RSA upload key), code_sign (signs application files) and
// upload_ed25519 (signs upload certificates in its place, much more cheaply;
// only our data server reads them, so no BOINC client is affected).
var keyPairs = []string{"upload", codeSignPair, ed25519Pair}

// ed25519Pair is the Ed25519 upload certificate key pair's prefix.
const ed25519Pair = "upload_ed25519"

// codeSignPair is the code-signing key pair's prefix.
const codeSignPair = "code_sign"

// Flags of keys generate that place the code-signing private key.
const (
	flagCodeSignOut      = "code-sign-out"
	flagCodeSignOnServer = "code-sign-on-server"
)

// codeSignAdvice tells the operator how to make the code-signing key. The
// private key is what a client trusts to run a program on every volunteer's
// computer, so it belongs on a machine an attacker who takes the server does
// not also get: BOINC's crypt_prog -genkey and sign_executable are run on
// such a machine, and the server holds only the public key.
const codeSignAdvice = "code-signing key: not made on the server by default, since whoever holds code_sign_private can ship a " +
	"program every volunteer runs. On an offline machine (or onto removable media) run\n" +
	"  taskctl keys generate --pair code_sign --code-sign-out DIR\n" +
	"copy DIR/code_sign_public into %s, keep DIR/code_sign_private off the server, and sign app files there " +
	"(taskctl sign, then app-version add --signatures). --code-sign-on-server keeps it in %s instead.\n"

func (t *tool) keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "manage the project's key pairs",
		Subcommands: []*cli.Command{{
			Name: "generate",
			Usage: "generate the upload and upload_ed25519 key pairs (<pair>_private, mode 0600, and <pair>_public), which the " +
				"server needs; the code_sign pair only with --" + flagCodeSignOut + " DIR (its private key goes to DIR, to be " +
				"kept off the server; its public key into --dir as well) or --" + flagCodeSignOnServer + ". " +
				"Refuses to replace existing keys unless --force (new code-signing keys invalidate every signed app version). " +
				"An existing project adds the cheaper upload certificate key with --pair " + ed25519Pair,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Value: "keys", Usage: "directory of the key files (relative to the project directory)"},
				&cli.BoolFlag{Name: "force", Usage: "replace existing key files"},
				&cli.StringSliceFlag{Name: "pair", Usage: "generate only this pair (" + strings.Join(keyPairs, ", ") + "; repeatable)"},
				&cli.StringFlag{Name: flagCodeSignOut, Usage: "make the code_sign pair with its files in this directory " +
					"(removable media, or an offline machine's), and its public key in --dir"},
				&cli.BoolFlag{Name: flagCodeSignOnServer, Usage: "make the code_sign pair in --dir, private key included " +
					"(anyone who takes the server can then sign programs volunteers run)"},
			},
			Action: func(c *cli.Context) error {
				cfg, err := config.CommonFrom(c)
				if err != nil {
					return err
				}
				dir := cfg.Path(c.String("dir"))
				out, onServer := c.String(flagCodeSignOut), c.Bool(flagCodeSignOnServer)
				if out != "" && onServer {
					return fmt.Errorf("--%s and --%s: choose one place for the code-signing private key", flagCodeSignOut, flagCodeSignOnServer)
				}
				pairs := keyPairs
				if c.IsSet("pair") {
					pairs = c.StringSlice("pair")
					for _, p := range pairs {
						if !slices.Contains(keyPairs, p) {
							return fmt.Errorf("--pair %q: want one of %s", p, strings.Join(keyPairs, ", "))
						}
					}
					if slices.Contains(pairs, codeSignPair) && out == "" && !onServer {
						return fmt.Errorf("--pair %s needs --%s DIR (its private key kept off the server) or --%s",
							codeSignPair, flagCodeSignOut, flagCodeSignOnServer)
					}
				}
				skipCodeSign := out == "" && !onServer
				if skipCodeSign {
					pairs = slices.DeleteFunc(slices.Clone(pairs), func(p string) bool { return p == codeSignPair })
				}
				var files []string
				for _, pair := range pairs {
					privDir := dir
					if pair == codeSignPair && out != "" {
						privDir = out
						files = append(files, filepath.Join(dir, pair+"_public"))
					}
					files = append(files, filepath.Join(privDir, pair+"_private"), filepath.Join(privDir, pair+"_public"))
				}
				if !c.Bool("force") {
					for _, p := range files {
						if _, err := os.Stat(p); err == nil {
							return fmt.Errorf("key file %s exists; use --force to replace it", p)
						} else if !errors.Is(err, fs.ErrNotExist) {
							return fmt.Errorf("check key file: %w", err)
						}
					}
				}
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return fmt.Errorf("create key directory: %w", err)
				}
				for _, pair := range pairs {
					if pair == codeSignPair && out != "" {
						if err := t.writeCodeSignOffServer(dir, out, c.Bool("force")); err != nil {
							return err
						}
						continue
					}
					if err := writePair(dir, pair, c.Bool("force")); err != nil {
						return err
					}
					t.printf("wrote %s and %s\n", filepath.Join(dir, pair+"_private"), filepath.Join(dir, pair+"_public"))
				}
				if skipCodeSign {
					t.printf(codeSignAdvice, dir, dir)
				}
				return nil
			},
		}, t.rotateCommand()},
	}
}

// writeCodeSignOffServer makes the code-signing pair in out and copies its
// public half into the project's key directory dir.
func (t *tool) writeCodeSignOffServer(dir, out string, force bool) error {
	if err := os.MkdirAll(out, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	if err := writePair(out, codeSignPair, force); err != nil {
		return err
	}
	pub, err := keys.ReadPublicFile(filepath.Join(out, codeSignPair+"_public"))
	if err != nil {
		return err
	}
	if err := keys.WritePublicFile(filepath.Join(dir, codeSignPair+"_public"), pub); err != nil {
		return err
	}
	t.printf("wrote %s and %s, and %s; keep %s off the server\n", filepath.Join(out, codeSignPair+"_private"),
		filepath.Join(out, codeSignPair+"_public"), filepath.Join(dir, codeSignPair+"_public"),
		filepath.Join(out, codeSignPair+"_private"))
	return nil
}

// writePair generates one key pair and writes it, public half last, so a
// new public file never exists without its private one. keys.WritePrivateFile
// never replaces a file, so with force the old private key is removed first.
func writePair(dir, pair string, force bool) error {
	priv := filepath.Join(dir, pair+"_private")
	if force {
		if err := os.Remove(priv); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace %s key: %w", pair, err)
		}
	}
	if err := newPair(dir, pair); err != nil {
		return fmt.Errorf("write %s key: %w", pair, err)
	}
	return nil
}

// newPair generates a pair of the kind its name says and writes it, the
// private file first and never over an existing one.
func newPair(dir, pair string) error {
	priv, pub := filepath.Join(dir, pair+"_private"), filepath.Join(dir, pair+"_public")
	if pair == ed25519Pair {
		k, err := keys.GenerateEd25519()
		if err != nil {
			return err
		}
		if err := keys.WriteEd25519PrivateFile(priv, k); err != nil {
			return err
		}
		return keys.WriteEd25519PublicFile(pub, k.Public().(ed25519.PublicKey))
	}
	k, err := keys.Generate()
	if err != nil {
		return err
	}
	if err := keys.WritePrivateFile(priv, k); err != nil {
		return err
	}
	return keys.WritePublicFile(pub, &k.PublicKey)
}
