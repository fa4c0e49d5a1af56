// Package keys reads, writes and uses RSA keys in the BOINC text format, and
// makes and checks BOINC signatures (PROTOCOL.md §5.3–§5.4, §8.4).
//
// The BOINC client only understands 1024-bit keys written as a "bits" line
// followed by a hex dump of fixed-size, zero-padded, big-endian fields, and
// signatures made with PKCS#1 v1.5 (block type 1) over the 32-character
// lower-case md5 hex string of the signed bytes, with no DigestInfo. A
// project has two key pairs: code_sign (app files, checked by the client) and
// upload (upload certificates, checked by the data server).
//
// Upload certificates may instead be signed with a third pair, an Ed25519
// key in PEM files (ed25519.go): only the project's data server checks them,
// and Ed25519 costs a small fraction of RSA's CPU per instance sent.
package keys

import (
	"crypto"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Bits is the only modulus size the BOINC key format can hold.
const Bits = 1024

// Field sizes of the BOINC key structs, in bytes.
const (
	modLen   = Bits / 8 // modulus, exponents
	primeLen = modLen / 2
	// publicLen is the size of a public key body: modulus ‖ exponent.
	publicLen = 2 * modLen
	// privateLen is the size of a private key body: modulus ‖ e ‖ d ‖ p ‖
	// q ‖ dP ‖ dQ ‖ qInv.
	privateLen = 3*modLen + 5*primeLen
	// hexLineLen is how many hex characters BOINC writes per line.
	hexLineLen = 64
)

// ErrBadKey is returned for key or signature text that cannot be used.
var ErrBadKey = errors.New("bad BOINC key")

// ErrBadSignature is returned by Verify when a signature does not match.
var ErrBadSignature = errors.New("signature does not match")

// Generate makes a new 1024-bit key with public exponent 65537, the largest
// key the BOINC client accepts.
func Generate() (*rsa.PrivateKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, Bits)
	if err != nil {
		return nil, fmt.Errorf("generate rsa key: %w", err)
	}
	return k, nil
}

// FormatPrivate writes k in BOINC's private key text format (the
// code_sign_private and upload_private files). It panics if k is not a
// two-prime key of at most 1024 bits, which Generate and ParsePrivate never
// return: such a key cannot be written in this format at all.
func FormatPrivate(k *rsa.PrivateKey) string {
	if len(k.Primes) != 2 || k.N.BitLen() > Bits {
		panic("keys: FormatPrivate needs a two-prime key of at most 1024 bits")
	}
	p, q := k.Primes[0], k.Primes[1]
	one := big.NewInt(1)
	dP := new(big.Int).Mod(k.D, new(big.Int).Sub(p, one))
	dQ := new(big.Int).Mod(k.D, new(big.Int).Sub(q, one))
	qInv := new(big.Int).ModInverse(q, p)
	body := make([]byte, 0, privateLen)
	body = appendField(body, k.N, modLen)
	body = appendField(body, big.NewInt(int64(k.E)), modLen)
	body = appendField(body, k.D, modLen)
	body = appendField(body, p, primeLen)
	body = appendField(body, q, primeLen)
	body = appendField(body, dP, primeLen)
	body = appendField(body, dQ, primeLen)
	body = appendField(body, qInv, primeLen)
	return strconv.Itoa(Bits) + "\n" + hexBlock(body)
}

// ParsePrivate reads a private key in BOINC's text format and checks that
// it is a consistent RSA key.
func ParsePrivate(text string) (*rsa.PrivateKey, error) {
	body, err := parseKeyText(text)
	if err != nil {
		return nil, err
	}
	if len(body) != privateLen {
		return nil, fmt.Errorf("%w: private key body is %d bytes, want %d", ErrBadKey, len(body), privateLen)
	}
	n := new(big.Int).SetBytes(body[0:modLen])
	e, err := exponent(body[modLen : 2*modLen])
	if err != nil {
		return nil, err
	}
	off := 2 * modLen
	if err := checkModulus(n); err != nil {
		return nil, err
	}
	d := new(big.Int).SetBytes(body[off : off+modLen])
	off += modLen
	p := new(big.Int).SetBytes(body[off : off+primeLen])
	off += primeLen
	q := new(big.Int).SetBytes(body[off : off+primeLen])
	k := &rsa.PrivateKey{PublicKey: rsa.PublicKey{N: n, E: e}, D: d, Primes: []*big.Int{p, q}}
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	k.Precompute()
	return k, nil
}

// FormatPublic writes k in BOINC's public key text format, as sent in
// <code_sign_key> and kept in the code_sign_public and upload_public files.
// It panics if k is larger than 1024 bits (see FormatPrivate).
func FormatPublic(k *rsa.PublicKey) string {
	if k.N.BitLen() > Bits {
		panic("keys: FormatPublic needs a key of at most 1024 bits")
	}
	body := make([]byte, 0, publicLen)
	body = appendField(body, k.N, modLen)
	body = appendField(body, big.NewInt(int64(k.E)), modLen)
	return strconv.Itoa(Bits) + "\n" + hexBlock(body)
}

// ParsePublic reads a public key in BOINC's text format.
func ParsePublic(text string) (*rsa.PublicKey, error) {
	body, err := parseKeyText(text)
	if err != nil {
		return nil, err
	}
	if len(body) != publicLen {
		return nil, fmt.Errorf("%w: public key body is %d bytes, want %d", ErrBadKey, len(body), publicLen)
	}
	n := new(big.Int).SetBytes(body[:modLen])
	e, err := exponent(body[modLen:])
	if err != nil {
		return nil, err
	}
	if err := checkModulus(n); err != nil {
		return nil, err
	}
	return &rsa.PublicKey{N: n, E: e}, nil
}

// Sign signs data the BOINC way and returns the signature text (hex lines
// of 64 characters and a "." line) for <file_signature>, <xml_signature> or
// <code_sign_key_signature>.
func Sign(k *rsa.PrivateKey, data []byte) (string, error) {
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.Hash(0), md5Hex(data))
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return hexBlock(sig), nil
}

// Verify checks a BOINC signature text over data. Whitespace in sig is
// ignored and reading stops at the first other non-hex character, as the
// client does.
func Verify(k *rsa.PublicKey, data []byte, sig string) error {
	raw, err := scanHex(sig)
	if err != nil {
		return fmt.Errorf("%w: signature: %w", ErrBadSignature, err)
	}
	if len(raw) != k.Size() {
		return fmt.Errorf("%w: signature is %d bytes, want %d", ErrBadSignature, len(raw), k.Size())
	}
	if err := rsa.VerifyPKCS1v15(k, crypto.Hash(0), md5Hex(data), raw); err != nil {
		return ErrBadSignature
	}
	return nil
}

// UploadCertificate is the text an upload certificate signs for one output
// file: its name, its size limit (an integer, as BOINC's "%.0f" writes
// it) and the Unix time after which it authorises nothing (UploadExpiry).
//
// A certificate must be dead once its result is over, and the data server
// cannot ask the database whether it is. Two things see to it. The
// scheduler closes every output of a result when it records the report
// (package outputfile), which holds as long as the file exists; after the
// file deleter removed it, only the certificate itself can say it is no
// longer good, so it carries its own expiry, the instance's report
// deadline plus a grace. The real client echoes back only <name>,
// <max_nbytes> and the text of <xml_signature> in an upload (file_xfer.cpp)
// and treats that text as opaque, so the expiry travels as a line after the
// signature inside <xml_signature> (UploadSignature), and the data server
// rebuilds this text from it to check the signature.
func UploadCertificate(name string, maxNbytes float64, expires int64) string {
	return "<name>" + name + "</name><max_nbytes>" + strconv.FormatFloat(maxNbytes, 'f', 0, 64) +
		"</max_nbytes><expires>" + strconv.FormatInt(expires, 10) + "</expires>"
}

// LegacyUploadCertificate is the text an upload certificate signed before
// certificates carried an expiry. The data server still accepts it, so the
// tasks on volunteers' machines when a project upgrades still upload: such
// a signature exists only for instances sent before the upgrade, and their
// outputs are closed like any other when reported (package outputfile).
func LegacyUploadCertificate(name string, maxNbytes float64) string {
	return "<name>" + name + "</name><max_nbytes>" + strconv.FormatFloat(maxNbytes, 'f', 0, 64) + "</max_nbytes>"
}

// expiryLine starts the line of an <xml_signature> text that carries the
// certificate's expiry.
const expiryLine = "expires "

// UploadSignature is the <xml_signature> text of an upload certificate:
// sig (a signature text, ending with its "." line) then the expiry line.
// Signature readers stop at the "." line, and the text holds nothing XML
// would escape, so the client stores and returns it unchanged.
func UploadSignature(sig string, expires int64) string {
	return strings.TrimRight(sig, " \t\r\n") + "\n" + expiryLine + strconv.FormatInt(expires, 10) + "\n"
}

// ErrNoExpiry is returned by UploadExpiry for a certificate without an
// expiry line: one signed before certificates expired, or made up.
var ErrNoExpiry = errors.New("upload certificate has no expiry")

// UploadExpiry returns the expiry carried by an <xml_signature> text made
// by UploadSignature, after the signature's "." line.
func UploadExpiry(xmlSignature string) (int64, error) {
	_, rest, ok := strings.Cut(xmlSignature, ".")
	if !ok {
		return 0, ErrNoExpiry
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(rest), expiryLine)
	if !ok {
		return 0, ErrNoExpiry
	}
	expires, err := strconv.ParseInt(v, 10, 64)
	if err != nil || expires <= 0 {
		return 0, fmt.Errorf("%w: expiry %q", ErrNoExpiry, v)
	}
	return expires, nil
}

// md5Hex is the message BOINC signs: the md5 of data as 32 lower-case hex
// characters.
func md5Hex(data []byte) []byte {
	sum := md5.Sum(data)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum[:])
	return out
}

// appendField appends x big-endian, left-padded with zeros to size bytes.
func appendField(b []byte, x *big.Int, size int) []byte {
	return append(b, x.FillBytes(make([]byte, size))...)
}

// hexBlock writes b as lower-case hex, 64 characters per line, then ".".
func hexBlock(b []byte) string {
	h := hex.EncodeToString(b)
	var sb strings.Builder
	sb.Grow(len(h) + len(h)/hexLineLen + 4)
	for len(h) > 0 {
		n := min(hexLineLen, len(h))
		sb.WriteString(h[:n])
		sb.WriteByte('\n')
		h = h[n:]
	}
	sb.WriteString(".\n")
	return sb.String()
}

// parseKeyText splits key text into its bits line and body.
func parseKeyText(text string) ([]byte, error) {
	text = strings.TrimLeft(text, " \t\r\n")
	first, rest, ok := strings.Cut(text, "\n")
	if !ok {
		return nil, fmt.Errorf("%w: no body after the bits line", ErrBadKey)
	}
	bits, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || bits <= 0 || bits > Bits {
		return nil, fmt.Errorf("%w: bits line %q", ErrBadKey, strings.TrimSpace(first))
	}
	body, err := scanHex(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return body, nil
}

// scanHex reads hex digits, skipping whitespace, up to the first other
// character (the "." line), as BOINC's readers do.
func scanHex(s string) ([]byte, error) {
	digits := make([]byte, 0, len(s))
scan:
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			digits = append(digits, c)
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		default:
			break scan
		}
	}
	if len(digits)%2 != 0 {
		return nil, errors.New("odd number of hex digits")
	}
	out := make([]byte, len(digits)/2)
	if _, err := hex.Decode(out, digits); err != nil {
		return nil, err
	}
	return out, nil
}

// exponent reads a public exponent field; Go wants a small odd int.
func exponent(field []byte) (int, error) {
	e := new(big.Int).SetBytes(field)
	if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
		return 0, fmt.Errorf("%w: public exponent %s", ErrBadKey, e.String())
	}
	return int(e.Int64()), nil
}

// checkModulus insists on exactly 1024 bits: BOINC cannot hold more, and Go
// refuses to sign or verify with less, so saying so here gives a clearer
// error than a failed signature later.
func checkModulus(n *big.Int) error {
	if n.BitLen() != Bits || n.Bit(0) == 0 {
		return fmt.Errorf("%w: modulus of %d bits, want an odd %d-bit number", ErrBadKey, n.BitLen(), Bits)
	}
	return nil
}
