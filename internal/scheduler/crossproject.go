package scheduler

import (
	"crypto/md5"
	"encoding/hex"

	"github.com/taskserver/taskserver/internal/row"
)

// crossProjectIDs are the account's identifiers a scheduler reply carries,
// as BOINC's scheduler computes them: emailHash is the md5 of the
// (lowercased) e-mail address, with which statistics sites match one
// volunteer's accounts across projects; cpid is the account's
// cross-project id, which the client echoes in later requests; and
// externalCPID, the md5 of cpid followed by the address, is the public
// form of cpid. Without a cross-project id both are empty (and left out).
func crossProjectIDs(u row.User) (emailHash, cpid, externalCPID string) {
	email := normalizeEmail(u.EmailAddr)
	emailHash = md5Hex(email)
	if u.CrossProjectID == "" {
		return emailHash, "", ""
	}
	return emailHash, u.CrossProjectID, md5Hex(u.CrossProjectID + email)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
