package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
)

// The upload certificate key (Ed25519).
//
// An upload certificate is checked only by the project's own data server:
// the BOINC client keeps <xml_signature> as opaque text (FILE_INFO::parse
// copies it, file_xfer.cpp sends it back verbatim with the upload) and never
// verifies it. So the project may sign certificates with any public-key
// scheme, and Ed25519 signs about forty times faster than the 1024-bit RSA
// upload key: the scheduler signs one certificate per output file of every
// instance it sends, the largest CPU cost of a scheduler reply with RSA.
// Like the RSA key it keeps the property that a data server holding only the
// public key cannot forge certificates.
//
// Key files are PEM: the private key as PKCS #8 ("PRIVATE KEY"), the public
// key as PKIX ("PUBLIC KEY"), as `openssl genpkey -algorithm ed25519` and
// `openssl pkey -pubout` write them. A signature is the 64-byte Ed25519
// signature of the certificate text, written like an RSA one (lower-case
// hex, 64 characters per line, then "."), so it sits in <xml_signature>
// unchanged; at 64 bytes against RSA's 128 its length says which key made it.

// Ed25519 key file names in a project's keys directory, beside BOINC's
// upload_private and upload_public.
const (
	Ed25519PrivateFile = "upload_ed25519_private"
	Ed25519PublicFile  = "upload_ed25519_public"
)

// PEM block types of the key files.
const (
	pemPrivate = "PRIVATE KEY"
	pemPublic  = "PUBLIC KEY"
)

// GenerateEd25519 makes a new upload certificate key.
func GenerateEd25519() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return k, nil
}

// FormatEd25519Private writes k as a PEM PKCS #8 private key. It panics if k
// is not a whole Ed25519 private key, which GenerateEd25519 and
// ParseEd25519Private never return.
func FormatEd25519Private(k ed25519.PrivateKey) string {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic("keys: FormatEd25519Private: " + err.Error())
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: pemPrivate, Bytes: der}))
}

// ParseEd25519Private reads a PEM PKCS #8 Ed25519 private key and checks
// that its public half matches its seed.
func ParseEd25519Private(text string) (ed25519.PrivateKey, error) {
	der, err := pemBody(text, pemPrivate)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	k, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: private key is %T, want ed25519", ErrBadKey, key)
	}
	return k, nil
}

// FormatEd25519Public writes k as a PEM PKIX public key. It panics if k is
// not 32 bytes long (see FormatEd25519Private).
func FormatEd25519Public(k ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil || len(k) != ed25519.PublicKeySize {
		panic(fmt.Sprintf("keys: FormatEd25519Public: %d-byte key: %v", len(k), err))
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: pemPublic, Bytes: der}))
}

// ParseEd25519Public reads a PEM PKIX Ed25519 public key.
func ParseEd25519Public(text string) (ed25519.PublicKey, error) {
	der, err := pemBody(text, pemPublic)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	k, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: public key is %T, want ed25519", ErrBadKey, key)
	}
	return k, nil
}

// pemBody returns the DER bytes of the one PEM block of type typ in text.
func pemBody(text, typ string) ([]byte, error) {
	b, rest := pem.Decode([]byte(text))
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: no PEM block", ErrBadKey)
	case b.Type != typ:
		return nil, fmt.Errorf("%w: PEM block %q, want %q", ErrBadKey, b.Type, typ)
	case len(b.Headers) != 0:
		return nil, fmt.Errorf("%w: encrypted or annotated PEM block", ErrBadKey)
	case strings.TrimSpace(string(rest)) != "":
		return nil, fmt.Errorf("%w: text after the PEM block", ErrBadKey)
	}
	return b.Bytes, nil
}

// WriteEd25519PrivateFile writes k to path with mode 0600, refusing to
// replace an existing file (the error wraps fs.ErrExist), as
// WritePrivateFile does.
func WriteEd25519PrivateFile(path string, k ed25519.PrivateKey) error {
	return writePrivateText(path, FormatEd25519Private(k))
}

// ReadEd25519PrivateFile reads an Ed25519 private key file. It refuses a file
// that group or others can access: whoever reads it can authorise any
// upload.
func ReadEd25519PrivateFile(path string) (ed25519.PrivateKey, error) {
	text, err := readPrivateText(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseEd25519Private(text)
	if err != nil {
		return nil, fmt.Errorf("read private key %s: %w", path, err)
	}
	return k, nil
}

// WriteEd25519PublicFile writes k to path with mode 0644, replacing any file
// there in one step.
func WriteEd25519PublicFile(path string, k ed25519.PublicKey) error {
	return writePublicText(path, FormatEd25519Public(k))
}

// ReadEd25519PublicFile reads an Ed25519 public key file.
func ReadEd25519PublicFile(path string) (ed25519.PublicKey, error) {
	text, err := readPublicText(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseEd25519Public(text)
	if err != nil {
		return nil, fmt.Errorf("read public key %s: %w", path, err)
	}
	return k, nil
}

// SignEd25519 signs data (an UploadCertificate's text) and returns the
// signature text for <xml_signature>. Ed25519 signing is deterministic and
// cannot fail for a whole key.
func SignEd25519(k ed25519.PrivateKey, data []byte) string {
	return hexBlock(ed25519.Sign(k, data))
}

// VerifyEd25519 checks a signature text made by SignEd25519. Whitespace is
// ignored and reading stops at the first other non-hex character, as for
// Verify.
func VerifyEd25519(k ed25519.PublicKey, data []byte, sig string) error {
	raw, err := scanHex(sig)
	if err != nil {
		return fmt.Errorf("%w: signature: %w", ErrBadSignature, err)
	}
	return verifyEd25519Raw(k, data, raw)
}

func verifyEd25519Raw(k ed25519.PublicKey, data, raw []byte) error {
	if len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature is %d bytes, want %d", ErrBadSignature, len(raw), ed25519.SignatureSize)
	}
	if len(k) != ed25519.PublicKeySize || !ed25519.Verify(k, data, raw) {
		return ErrBadSignature
	}
	return nil
}

// UploadVerifier checks upload certificates signed by any key a data server
// accepts: the RSA upload key (certificates of instances sent before the
// project switched to Ed25519, or by a scheduler without an Ed25519 key)
// and any number of Ed25519 keys (the current one and, after a rotation,
// the previous ones until their instances' deadlines pass). The signature's
// length says which kind of key made it, so each check costs one
// verification per key of that kind.
type UploadVerifier struct {
	// RSA is the BOINC upload public key; nil accepts no RSA certificate.
	RSA *rsa.PublicKey
	// Ed25519 are the Ed25519 upload certificate public keys accepted.
	Ed25519 []ed25519.PublicKey
}

// Empty reports whether v has no key, so that it accepts nothing.
func (v UploadVerifier) Empty() bool { return v.RSA == nil && len(v.Ed25519) == 0 }

// Verify checks sig over the certificate text cert (see UploadCertificate).
func (v UploadVerifier) Verify(cert []byte, sig string) error {
	raw, err := scanHex(sig)
	if err != nil {
		return fmt.Errorf("%w: signature: %w", ErrBadSignature, err)
	}
	switch {
	case len(raw) == ed25519.SignatureSize:
		for _, k := range v.Ed25519 {
			if verifyEd25519Raw(k, cert, raw) == nil {
				return nil
			}
		}
	case v.RSA != nil && len(raw) == v.RSA.Size():
		if err := rsa.VerifyPKCS1v15(v.RSA, 0, md5Hex(cert), raw); err == nil {
			return nil
		}
	}
	return ErrBadSignature
}
