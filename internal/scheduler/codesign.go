package scheduler

import (
	"strings"

	"github.com/taskserver/taskserver/internal/keys"
)

// addCodeSignKey gives the client the project's code-signing key when it
// needs it (PROTOCOL.md §5.2). A client without a key trusts the first one it
// is sent. A client holding another key (the project rotated its key) takes
// the new one only with its rotation signature, so the key goes with the
// signature or not at all: sent alone, or to a client that already has it,
// the client logs "Missing code sign key signature" on every RPC.
func (s *Service) addCodeSignKey(x *rpc) {
	ours := s.deps.CodeSignKey
	if ours == "" {
		return
	}
	theirs := x.req.CodeSignKey
	switch {
	case strings.TrimSpace(theirs) == "":
		x.reply.CodeSignKey = ours
	case sameKey(theirs, ours):
	case s.deps.CodeSignKeySignature != "":
		x.reply.CodeSignKey = ours
		x.reply.CodeSignKeySignature = s.deps.CodeSignKeySignature
	default:
		s.log.Debug("client holds another code-signing key and no rotation signature is configured", "host_id", x.host.ID)
	}
}

// sameKey compares two public key texts by value, so that a client that
// stored the key with other line breaks or case is not sent it again.
func sameKey(a, b string) bool {
	if strings.TrimSpace(a) == strings.TrimSpace(b) {
		return true
	}
	ka, errA := keys.ParsePublic(a)
	kb, errB := keys.ParsePublic(b)
	return errA == nil && errB == nil && ka.Equal(kb)
}
