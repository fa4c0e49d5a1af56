package taskctl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestUserListShowSetDelete(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "ann@example.org", "--name", "Ann"))
	b.mustRun(t, "user", "create", "--email", "ben@example.org", "--name", "Ben", "--submit-allowed")
	out := b.mustRun(t, "user", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "\tann@example.org\t2023-11-14T22:13:20Z\tfalse\t0.00\tAnn") ||
		!strings.Contains(lines[1], "\tben@example.org\t") || strings.Contains(out, auth) {
		t.Fatalf("user list = %q; want Ann then Ben, no authenticator", out)
	}
	if out := b.mustRun(t, "user", "list", "--limit", "1"); strings.Count(out, "\n") != 1 {
		t.Fatalf("user list --limit 1 = %q", out)
	}
	out = b.mustRun(t, "user", "show", "ben@example.org")
	if !strings.Contains(out, "email: ben@example.org\nname: Ben\n") || !strings.Contains(out, "submit_allowed: true\n") {
		t.Fatalf("user show = %q", out)
	}
	if _, _, err := b.run(t, "user", "show", "nobody@example.org"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("user show of a missing account = %v, want ErrNotFound", err)
	}

	b.mustRun(t, "user", "set", "--email", "ann@example.org", "--new-email", "anne@example.org", "--name", "Anne")
	u, err := b.st.UserGetByEmail(ctx, "anne@example.org")
	if err != nil || u.Authenticator != auth || u.Name != "Anne" || u.SubmitAllowed {
		t.Fatalf("user after set = %+v, %v; want anne@example.org, Anne, submit not allowed", u, err)
	}
	if _, _, err := b.run(t, "user", "set", "--email", "anne@example.org", "--new-email", "ben@example.org"); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("user set to a taken address = %v, want ErrDuplicate", err)
	}
	if _, _, err := b.run(t, "user", "set", "--email", "anne@example.org"); err == nil {
		t.Fatal("user set with nothing to change succeeded, want an error")
	}
	if _, _, err := b.run(t, "user", "set", "--email", "anne@example.org", "--new-email", "not-an-address"); err == nil {
		t.Fatal("user set --new-email without @ succeeded, want an error")
	}

	// An account with a host keeps its row.
	ben, err := b.st.UserGetByEmail(ctx, "ben@example.org")
	if err != nil {
		t.Fatal(err)
	}
	storetest.Host(t, b.st, storetest.HostOptions{User: ben.ID, CreateTime: 1})
	if _, _, err := b.run(t, "user", "delete", "ben@example.org"); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("user delete of an account with a host = %v, want ErrInUse", err)
	}
	if out := b.mustRun(t, "user", "delete", "anne@example.org"); out != "deleted user "+m2s(u.ID)+" <anne@example.org>\n" {
		t.Fatalf("user delete = %q", out)
	}
	if _, err := b.st.UserGet(ctx, u.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UserGet after delete = %v, want ErrNotFound", err)
	}
	if _, _, err := b.run(t, "user", "delete", "anne@example.org"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second user delete = %v, want ErrNotFound", err)
	}
}

func TestJobShowListsInstances(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	b.mustRun(t, "app", "add", "--name", "demo")
	input := filepath.Join(b.projectDir, "in.dat")
	if err := os.WriteFile(input, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wuID := id(t, b.mustRun(t, "job", "submit", "--app", "demo", "--name", "j1", "--input", input,
		"--min-quorum", "1", "--target-nresults", "1"))
	storetest.Instance(t, b.st, storetest.InstanceOptions{Job: wuID, Name: "j1_0", CreateTime: b.now.Unix(),
		ServerState: state.ServerInProgress, Host: 7, SentTime: b.now.Unix(), ReportDeadline: b.now.Unix() + 3600})
	out := b.mustRun(t, "job", "show", "j1")
	if !strings.HasPrefix(out, "job "+m2s(wuID)+" j1\n") || !strings.Contains(out, "instances: 1\n") ||
		!strings.Contains(out, "\tj1_0\t"+state.ServerInProgress.String()+"\t") ||
		!strings.Contains(out, "\thost 7\tsent 2023-11-14T22:13:20Z\treceived -\tdeadline 2023-11-14T23:13:20Z\n") {
		t.Fatalf("job show = %q", out)
	}
	if _, _, err := b.run(t, "job", "show", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("job show of a missing job = %v, want ErrNotFound", err)
	}
}
