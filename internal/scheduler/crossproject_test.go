package scheduler

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
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

// The account elements of a reply, against values worked out by hand
// (md5sum of the strings in the comments), and the team as BOINC's
// scheduler sends it: <teamid> and <team_name> for a member, and for a
// user in no team an empty <team_name> alone, which clears the name the
// client shows (it keeps a name it is not sent).
func TestReplyCarriesAccountAndTeam(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	const sampleAuth = "0123456789abcdef0123456789abcdef"
	u := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 5, EmailAddr: "Volunteer@Example.org", Name: "vol",
		Authenticator: sampleAuth, CrossProjectID: "00112233445566778899aabbccddeeff"})
	team := storetest.Team(t, f.st, storetest.TeamOptions{CreateTime: 5, Name: "Crunchers & Co", Founder: u.ID})
	body, err := os.ReadFile(samples + "02_scheduler_request_first_rpc.body.xml")
	if err != nil {
		t.Fatal(err)
	}
	post := func() string {
		t.Helper()
		code, out := f.post(string(body))
		if code != http.StatusOK {
			t.Fatalf("POST sample 02 = %d %q", code, out)
		}
		return out
	}
	out := post()
	for _, want := range []string{
		"<userid>" + strconv.FormatInt(u.ID, 10) + "</userid>",
		"<user_name>vol</user_name>",
		// md5("volunteer@example.org")
		"<email_hash>49b1e805f7fdd2a5555d53f14dd8ae30</email_hash>",
		"<cross_project_id>00112233445566778899aabbccddeeff</cross_project_id>",
		// md5("00112233445566778899aabbccddeeff" + "volunteer@example.org")
		"<external_cpid>eea8a960b3304012fd26843d2bdac51b</external_cpid>",
		"<teamid>" + strconv.FormatInt(team.ID, 10) + "</teamid>",
		"<team_name>Crunchers &amp; Co</team_name>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reply to a team member lacks %s:\n%s", want, out)
		}
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
	if err != nil || rep.TeamName != "Crunchers & Co" || rep.TeamID != team.ID {
		t.Errorf("reply parsed back: team %d %q, %v; want %d %q", rep.TeamID, rep.TeamName, err, team.ID, "Crunchers & Co")
	}

	if _, err := f.st.UserSetTeam(ctx, u.ID, 0); err != nil {
		t.Fatal(err)
	}
	out = post()
	if !strings.Contains(out, "<team_name></team_name>") || strings.Contains(out, "<teamid>") {
		t.Errorf("reply to a user who left the team: want an empty <team_name> and no <teamid>:\n%s", out)
	}
}
