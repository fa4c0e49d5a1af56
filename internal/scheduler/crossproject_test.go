package scheduler

import (
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/store/storetest"
)

// A reply to a real client's first request (sample 02) carries what BOINC's
// scheduler sends about the account: <email_hash>, the md5 of the
// lowercased address, with which statistics sites match a volunteer's
// accounts, and <cross_project_id> with <external_cpid>, the md5 of the id
// followed by the address.
func TestReplyCarriesEmailHashAndExternalCPID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const sampleAuth = "0123456789abcdef0123456789abcdef"
	storetest.User(t, f.st, storetest.UserOptions{CreateTime: 5, EmailAddr: "Volunteer@Example.org", Name: "vol",
		Authenticator: sampleAuth, CrossProjectID: "00112233445566778899aabbccddeeff"})
	body, err := os.ReadFile(samples + "02_scheduler_request_first_rpc.body.xml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "<authenticator>"+sampleAuth+"</authenticator>") {
		t.Fatalf("sample 02 no longer carries account key %s", sampleAuth)
	}
	code, out := f.post(string(body))
	if code != http.StatusOK {
		t.Fatalf("POST sample 02 = %d %q", code, out)
	}
	md5hex := func(s string) string { sum := md5.Sum([]byte(s)); return hex.EncodeToString(sum[:]) }
	for _, want := range []string{
		"<email_hash>" + md5hex("volunteer@example.org") + "</email_hash>",
		"<cross_project_id>00112233445566778899aabbccddeeff</cross_project_id>",
		"<external_cpid>" + md5hex("00112233445566778899aabbccddeeff"+"volunteer@example.org") + "</external_cpid>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reply lacks %s:\n%s", want, out)
		}
	}
}
