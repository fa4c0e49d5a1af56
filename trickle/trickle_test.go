package trickle_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/trickle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echo struct{ seen []trickle.Message }

func (e *echo) Handle(_ context.Context, m trickle.Message) ([]trickle.Reply, error) {
	e.seen = append(e.seen, m)
	return []trickle.Reply{{Variety: "echo", Body: "<got>" + m.Variety + "</got>"}}, nil
}

func TestGoHandlerThroughRun(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, v := range []string{"progress", "checkpoint"} {
		m := protocol.NewMsgFromHost("wu_0", int64(i), v, "")
		if _, err := st.MsgFromHostInsert(ctx, []row.MsgFromHost{{CreateTime: 1, HostID: 7, Variety: v, ResultName: "wu_0",
			MD5: m.MD5(), XML: m.XML}}); err != nil {
			t.Fatal(err)
		}
	}
	h := &echo{}
	p := trickle.Program{Flags: []job.Flag{{Name: "greeting", Value: "hi"}},
		NewHandler: func(env job.Env) (trickle.Handler, error) {
			if env.Flags["greeting"] != "hi" {
				t.Errorf("own flag greeting = %q, want its default hi", env.Flags["greeting"])
			}
			return h, nil
		}}
	args := []string{"my_trickle_handler", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", t.TempDir(),
		"--variety", "progress"}
	if err := trickle.Run(ctx, args, p); err != nil {
		t.Fatal(err)
	}
	if len(h.seen) != 1 || h.seen[0].Variety != "progress" || h.seen[0].HostID != 7 || h.seen[0].ResultName != "wu_0" {
		t.Fatalf("handler saw %+v, want the one progress message of host 7, task wu_0 (--variety)", h.seen)
	}
	down, err := st.MsgToHostTake(ctx, 7, 10)
	if err != nil || len(down) != 1 || down[0].Variety != "echo" {
		t.Fatalf("queued trickle-downs %+v, %v; want the handler's echo", down, err)
	}
}
