package main

import (
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// uploadKeys sign the upload certificates the scheduler sends and check
// the ones the data server receives.
type uploadKeys struct {
	// rsa is the BOINC upload key. It signs when there is no Ed25519 key
	// and, kept beside one, lets instances sent before the switch upload.
	// Nil in a project that has only the Ed25519 key.
	rsa *rsa.PrivateKey
	// ed signs every certificate when set.
	ed ed25519.PrivateKey
	// accept are the Ed25519 public keys the data server accepts: ed's
	// public half and the --upload-cert-accept files (keys retired by a
	// rotation whose instances may still be uploading).
	accept []ed25519.PublicKey
}

// readUploadKeys reads the keys named by the flags. A key file named
// explicitly must exist; a default one may be missing, but one of the two
// private keys must be there.
func readUploadKeys(c *cli.Context, cfg config.Common) (uploadKeys, error) {
	var k uploadKeys
	if p := c.String(flagUploadCertKey); p != "" {
		ed, err := keys.ReadEd25519PrivateFile(cfg.Path(p))
		switch {
		case err == nil:
			k.ed = ed
			k.accept = append(k.accept, ed.Public().(ed25519.PublicKey))
		case errors.Is(err, os.ErrNotExist) && !c.IsSet(flagUploadCertKey):
		default:
			return k, fmt.Errorf("--%s: %w", flagUploadCertKey, err)
		}
	}
	if p := c.String(flagUploadKey); p != "" {
		r, err := keys.ReadPrivateFile(cfg.Path(p))
		switch {
		case err == nil:
			k.rsa = r
		case errors.Is(err, os.ErrNotExist) && !c.IsSet(flagUploadKey) && k.ed != nil:
		default:
			return k, fmt.Errorf("--%s: %w", flagUploadKey, err)
		}
	}
	if k.rsa == nil && k.ed == nil {
		return k, fmt.Errorf("no upload key: set --%s or --%s", flagUploadCertKey, flagUploadKey)
	}
	for _, p := range c.StringSlice(flagUploadCertAccept) {
		pub, err := keys.ReadEd25519PublicFile(cfg.Path(p))
		if err != nil {
			return k, fmt.Errorf("--%s: %w", flagUploadCertAccept, err)
		}
		k.accept = append(k.accept, pub)
	}
	return k, nil
}

// rsaPublic is the RSA public key the data server checks, nil if none.
func (k uploadKeys) rsaPublic() *rsa.PublicKey {
	if k.rsa == nil {
		return nil
	}
	return &k.rsa.PublicKey
}

// signer names the key that signs, for the start-up log line.
func (k uploadKeys) signer() string {
	if k.ed != nil {
		return "ed25519"
	}
	return "rsa"
}
