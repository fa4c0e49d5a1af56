package taskctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// keyPairs are the project's key pairs, by BOINC's file names: upload
// (signs upload certificates) and code_sign (signs application files).
var keyPairs = []string{"upload", "code_sign"}

func (t *tool) keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "manage the project's key pairs",
		Subcommands: []*cli.Command{{
			Name: "generate",
			Usage: "generate the upload and code_sign key pairs (<pair>_private, mode 0600, and <pair>_public); " +
				"refuses to replace existing keys unless --force (new code-signing keys invalidate every signed app version)",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Value: "keys", Usage: "directory of the key files (relative to the project directory)"},
				&cli.BoolFlag{Name: "force", Usage: "replace existing key files"},
			},
			Action: func(c *cli.Context) error {
				cfg, err := config.CommonFrom(c)
				if err != nil {
					return err
				}
				dir := cfg.Path(c.String("dir"))
				if !c.Bool("force") {
					for _, pair := range keyPairs {
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
				for _, pair := range keyPairs {
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
	k, err := keys.Generate()
	if err != nil {
		return fmt.Errorf("generate %s key: %w", pair, err)
	}
	priv := filepath.Join(dir, pair+"_private")
	if force {
		if err := os.Remove(priv); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace %s key: %w", pair, err)
		}
	}
	if err := keys.WritePrivateFile(priv, k); err != nil {
		return fmt.Errorf("write %s key: %w", pair, err)
	}
	if err := keys.WritePublicFile(filepath.Join(dir, pair+"_public"), &k.PublicKey); err != nil {
		return fmt.Errorf("write %s key: %w", pair, err)
	}
	return nil
}
