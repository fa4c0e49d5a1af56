package keys

import (
	"crypto/rsa"
	"strings"
)

// RotationSignatureFile is the name, beside the code-signing public key, of
// the file holding the new key's text signed with the previous private key.
// A client that already trusts a key takes a new one only with this
// signature (<code_sign_key_signature>, PROTOCOL.md §5.2).
const RotationSignatureFile = "code_sign_key_signature"

// SignRotation signs the text of the new public key, as sent in
// <code_sign_key>, with the old private key. The client trims the key text
// before checking, so the signature is over the trimmed text.
func SignRotation(old *rsa.PrivateKey, newKey *rsa.PublicKey) (string, error) {
	return Sign(old, []byte(strings.TrimSpace(FormatPublic(newKey))))
}

// VerifyRotation checks a rotation signature of the key text newKeyText
// against the old public key, as a client holding the old key does.
func VerifyRotation(old *rsa.PublicKey, newKeyText, sig string) error {
	return Verify(old, []byte(strings.TrimSpace(newKeyText)), sig)
}
