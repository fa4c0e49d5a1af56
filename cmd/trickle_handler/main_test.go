package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOnePassGrantsCreditOnce(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	u := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "a", Authenticator: "k"})
	h := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: u.ID})
	storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Name: "wu_0", Host: h.ID, User: u.ID,
		ServerState: state.ServerInProgress, ReportDeadline: 1})
	m := protocol.NewMsgFromHost("wu_0", 1, "progress", "<cpu_time>100</cpu_time>")
	if _, err := st.MsgFromHostInsert(ctx, []row.MsgFromHost{{CreateTime: 1, HostID: h.ID, Variety: "progress",
		ResultName: "wu_0", MD5: m.MD5(), XML: m.XML}}); err != nil {
		t.Fatal(err)
	}
	args := []string{"trickle_handler", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", t.TempDir(),
		"--credit-per-cpu-second", "0.01", "--extend-deadline", "1h"}
	for range 2 {
		if err := run(ctx, args); err != nil {
			t.Fatalf("run(%v): %v", args, err)
		}
	}
	var credit float64
	if err := st.DB().QueryRowContext(ctx, `SELECT total_credit FROM host WHERE id = ?`, h.ID).Scan(&credit); err != nil {
		t.Fatal(err)
	}
	if credit != 1 {
		t.Errorf("host credit after two passes %v, want 1 (100 s at 0.01, once)", credit)
	}
	var deadline int64
	if err := st.DB().QueryRowContext(ctx, `SELECT report_deadline FROM result WHERE name = 'wu_0'`).Scan(&deadline); err != nil {
		t.Fatal(err)
	}
	if deadline < 3600 {
		t.Errorf("task deadline %d, want it extended to an hour from now", deadline)
	}
}

func TestNothingToDoRefused(t *testing.T) {
	err := run(context.Background(), []string{"trickle_handler", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--one-pass", "--listen", ""})
	if err == nil || !strings.Contains(err.Error(), "--handler-cmd") {
		t.Errorf("run without anything to do = %v, want a refusal naming --handler-cmd", err)
	}
}
