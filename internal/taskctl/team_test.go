package taskctl_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/store/storetest"
)

// user set-password takes the password from standard input (or a prompt),
// never from the command line, and stores bcrypt of the client's md5 made
// with the account's own address, so BOINC Manager's lookup_account
// accepts it whatever case the operator typed the address in.
func TestUserSetPasswordCommand(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "vol@example.org", "--name", "Vol"))
	b.stdin = "pass word 1\n"
	b.mustRun(t, "user", "set-password", "--email", "VOL@example.org")
	u, err := b.st.UserGetByEmail(ctx, "vol@example.org")
	if err != nil || !strings.HasPrefix(u.PasswdHash, "$2") {
		t.Fatalf("stored passwd_hash %q, %v; want bcrypt", u.PasswdHash, err)
	}
	if num, got := lookupAccount(t, b, "vol@example.org", "pass word 1"); num != 0 || got != auth {
		t.Fatalf("lookup_account with the password set-password read = error %d, key %q; want the account key", num, got)
	}
	for _, tt := range []struct {
		name, stdin string
		args        []string
	}{
		{"too short", "12345\n", nil},
		{"no password", "", nil},
		{"empty line", "\n", nil},
		{"password on the command line", "pass word 2\n", []string{"--password", "pass word 2"}},
		{"no such account", "pass word 2\n", []string{"--email", "nobody@example.org"}},
	} {
		b.stdin = tt.stdin
		args := append([]string{"user", "set-password", "--email", "vol@example.org"}, tt.args...)
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("%s: taskctl %s succeeded, want an error", tt.name, strings.Join(args, " "))
		}
	}
	after, err := b.st.UserGetByEmail(ctx, "vol@example.org")
	if err != nil || after.PasswdHash != u.PasswdHash {
		t.Errorf("refused set-password calls changed the stored hash: %v", err)
	}
}

// The team commands: create (the founder joins), join, move, leave and
// the member counts that follow; show and list; the refusals.
func TestTeamCommands(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	for _, e := range []string{"ann", "ben", "cat"} {
		b.mustRun(t, "user", "create", "--email", e+"@example.org", "--name", e)
	}
	red, err := strconv.ParseInt(strings.TrimSpace(b.mustRun(t, "team", "create", "--name", " Red Team ",
		"--founder", "ann@example.org", "--type", "2", "--url", "https://red.example.org")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	blue := strings.TrimSpace(b.mustRun(t, "team", "create", "--name", "Blue"))
	b.mustRun(t, "team", "create", "--name", "Shut", "--joinable=false")

	if out := b.mustRun(t, "team", "join", "--email", "ben@example.org", "--team", "red team"); !strings.Contains(out, "joined team") {
		t.Errorf("team join printed %q", out)
	}
	b.mustRun(t, "team", "join", "--email", "cat@example.org", "--team", blue) // by id
	if out := b.mustRun(t, "team", "join", "--email", "cat@example.org", "--team", "Red Team"); !strings.Contains(out, "left team "+blue) {
		t.Errorf("moving teams printed %q, want it to say which team was left", out)
	}
	if out := b.mustRun(t, "team", "leave", "--email", "ben@example.org"); !strings.Contains(out, "left team") {
		t.Errorf("team leave printed %q", out)
	}
	for _, args := range [][]string{
		{"team", "join", "--email", "ben@example.org", "--team", "Shut"},
		{"team", "join", "--email", "ben@example.org", "--team", "No Such"},
		{"team", "join", "--email", "nobody@example.org", "--team", "Blue"},
		{"team", "create", "--name", "RED TEAM"},
		{"team", "create", "--name", "  "},
		{"team", "create", "--name", "Typed", "--type", "13"},
		{"team", "create", "--name", "Founded", "--founder", "nobody@example.org"},
		{"team", "show", "No Such"},
	} {
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("taskctl %s succeeded, want an error", strings.Join(args, " "))
		}
	}
	for name, want := range map[string]int{"Red Team": 2, "Blue": 0, "Shut": 0} {
		tm, err := b.st.TeamGetByName(ctx, name)
		if err != nil || tm.NUsers != want {
			t.Errorf("team %s: nusers %d, %v; want %d", name, tm.NUsers, err, want)
		}
	}
	for email, want := range map[string]int64{"ann@example.org": red, "ben@example.org": 0, "cat@example.org": red} {
		if u, err := b.st.UserGetByEmail(ctx, email); err != nil || u.TeamID != want {
			t.Errorf("%s: teamid %d, %v; want %d", email, u.TeamID, err, want)
		}
	}
	show := b.mustRun(t, "team", "show", strconv.FormatInt(red, 10))
	for _, want := range []string{"name: Red Team\n", "members: 2\n", "type: 2 (Company)\n", "url: https://red.example.org\n",
		"<ann@example.org>", "country: International\n", "joinable: true\n"} {
		if !strings.Contains(show, want) {
			t.Errorf("team show lacks %q:\n%s", want, show)
		}
	}
	list := strings.Split(strings.TrimSpace(b.mustRun(t, "team", "list")), "\n")
	if len(list) != 3 || !strings.HasSuffix(list[0], "\tRed Team") || !strings.HasPrefix(list[0], strconv.FormatInt(red, 10)+"\t2\t") {
		t.Errorf("team list = %q, want three teams, Red Team first with 2 members", list)
	}
	if _, _, err := b.run(t, "user", "delete", "cat@example.org"); err == nil {
		t.Error("user delete of a team member succeeded, want a refusal (the team counts it)")
	}
}
