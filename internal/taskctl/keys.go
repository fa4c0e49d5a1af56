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
var keyPairs = []string{"upload", "code_sign", ed25519Pair}

// ed25519Pair is the Ed25519 upload certificate key pair's prefix.
const ed25519Pair = "upload_ed25519"

func (t *tool) keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "manage the project's key pairs",
		Subcommands: []*cli.Command{{
			Name: "generate",
			Usage: "generate the upload, code_sign and upload_ed25519 key pairs (<pair>_private, mode 0600, and <pair>_public); " +
				"refuses to replace existing keys unless --force (new code-signing keys invalidate every signed app version). " +
				"An existing project adds the cheaper upload certificate key with --pair " + ed25519Pair,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Value: "keys", Usage: "directory of the key files (relative to the project directory)"},
				&cli.BoolFlag{Name: "force", Usage: "replace existing key files"},
				&cli.StringSliceFlag{Name: "pair", Usage: "generate only this pair (" + strings.Join(keyPairs, ", ") + "; repeatable)"},
			},
			Action: func(c *cli.Context) error {
				cfg, err := config.CommonFrom(c)
				if err != nil {
					return err
				}
				dir := cfg.Path(c.String("dir"))
				pairs := keyPairs
				if c.IsSet("pair") {
					pairs = c.StringSlice("pair")
					for _, p := range pairs {
						if !slices.Contains(keyPairs, p) {
							return fmt.Errorf("--pair %q: want one of %s", p, strings.Join(keyPairs, ", "))
						}
					}
				}
				if !c.Bool("force") {
					for _, pair := range pairs {
						for _, suffix := range []string{"_private", "_public"} {
							p := filepath.Join(dir, pair+suffix)
							if _, err := os.Stat(p); err == nil {
								return fmt.Errorf("key file %s exists; use --force to replace it", p)
							} else if !errors.Is(err, fs.ErrNotExist) {
								return fmt.Errorf("check key file: %w", err)
							}
						}
					}
				}
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return fmt.Errorf("create key directory: %w", err)
				}
				for _, pair := range pairs {
					if err := writePair(dir, pair, c.Bool("force")); err != nil {
						return err
					}
					t.printf("wrote %s and %s\n", filepath.Join(dir, pair+"_private"), filepath.Join(dir, pair+"_public"))
				}
				return nil
			},
		}, t.rotateCommand()},
	}
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
