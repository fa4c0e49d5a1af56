package trickle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const t0 = int64(1_800_000_000)

type fixture struct {
	t    *testing.T
	ctx  context.Context
	st   *store.Store
	user row.User
	host row.Host
	task row.Result
	now  atomic.Int64
}

func setup(t *testing.T) *fixture {
	f := &fixture{t: t, ctx: context.Background(), st: storetest.New(t)}
	f.now.Store(t0)
	f.user = storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "a", Authenticator: "k1"})
	f.host = storetest.Host(t, f.st, storetest.HostOptions{CreateTime: 1, User: f.user.ID, PFpops: 1e9})
	f.task = storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Name: "wu_a_0", Host: f.host.ID,
		User: f.user.ID, ServerState: state.ServerInProgress, SentTime: t0 - 100, ReportDeadline: t0 + 100})
	return f
}

// send stores trickle-ups from the fixture's host as the scheduler does,
// one per body, and returns their ids.
func (f *fixture) send(variety string, bodies ...string) []int64 {
	f.t.Helper()
	var rows []row.MsgFromHost
	for i, b := range bodies {
		m := protocol.NewMsgFromHost(f.task.Name, t0+int64(i), variety, b)
		rows = append(rows, row.MsgFromHost{CreateTime: t0, HostID: f.host.ID, Variety: variety, ResultName: f.task.Name,
			MD5: m.MD5(), XML: m.XML})
	}
	if _, err := f.st.MsgFromHostInsert(f.ctx, rows); err != nil {
		f.t.Fatal(err)
	}
	msgs, err := f.st.MsgFromHostListRecent(f.ctx, f.host.ID, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []int64
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

func (f *fixture) service(cfg Config, h Handler) *Service {
	f.t.Helper()
	if cfg.Mod == 0 {
		cfg.Mod = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	svc, err := New(cfg, Deps{Store: f.st, Handler: h, Now: func() time.Time { return time.Unix(f.now.Load(), 0) }})
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

func (f *fixture) unhandled() int {
	f.t.Helper()
	msgs, err := f.st.MsgFromHostListUnhandled(f.ctx, store.MsgFromHostListParams{Mod: 1, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(msgs)
}

func (f *fixture) count(query string, args ...any) float64 {
	f.t.Helper()
	var n float64
	if err := f.st.DB().QueryRowContext(f.ctx, query, args...).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// recorder counts its calls per message and replies to each.
type recorder struct {
	mu    sync.Mutex
	calls map[int64]int
	fail  map[int64]int // failures left per message
	delay time.Duration
}

func (r *recorder) Handle(ctx context.Context, m row.MsgFromHost) ([]Reply, error) {
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[int64]int{}
	}
	r.calls[m.ID]++
	if r.fail[m.ID] > 0 {
		r.fail[m.ID]--
		return nil, errors.New("science database down")
	}
	return []Reply{{Variety: "ack", Body: "<seen>" + m.Variety + "</seen>"}}, nil
}

func TestExactlyOnceAcrossReplicas(t *testing.T) {
	f := setup(t)
	ids := f.send("progress", "<cpu_time>10</cpu_time>", "<cpu_time>10</cpu_time>\n<n>2</n>", "<cpu_time>10</cpu_time>\n<n>3</n>",
		"<cpu_time>10</cpu_time>\n<n>4</n>")
	cfg := Config{CreditPerCPUSecond: 0.5, CreditMaxCPUSeconds: 100}
	// Two replicas given the same messages (a hand-over, a mistaken
	// --mod) race; the handler is slow so both get to every message.
	h := &recorder{delay: 20 * time.Millisecond}
	a, b := f.service(cfg, h), f.service(cfg, h)
	var wg sync.WaitGroup
	for _, s := range []*Service{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.RunOnce(f.ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := f.unhandled(); n != 0 {
		t.Fatalf("%d messages unhandled after both replicas ran", n)
	}
	// Each message's effects happened once: one reply, its credit once.
	if n := f.count(`SELECT COUNT(*) FROM msg_to_host WHERE hostid = ?`, f.host.ID); n != float64(len(ids)) {
		t.Errorf("%v trickle-downs queued for %d messages, want one each", n, len(ids))
	}
	want := float64(len(ids)) * 10 * 0.5
	if got := f.count(`SELECT total_credit FROM host WHERE id = ?`, f.host.ID); got != want {
		t.Errorf("host credit %v, want %v (each message credited once)", got, want)
	}
	if got := f.count(`SELECT total_credit FROM user WHERE id = ?`, f.user.ID); got != want {
		t.Errorf("user credit %v, want %v", got, want)
	}
	// Running again changes nothing.
	if n, err := a.RunOnce(f.ctx); err != nil || n != 0 {
		t.Errorf("RunOnce after all were handled = %d, %v; want 0, nil", n, err)
	}

	// With --mod 2 each replica takes its own half: exactly the messages
	// whose id hashes to its index.
	more := f.send("progress", "<n>5</n>", "<n>6</n>", "<n>7</n>", "<n>8</n>", "<n>9</n>", "<n>10</n>")
	more = slices.DeleteFunc(more, func(id int64) bool { return slices.Contains(ids, id) })
	if len(more) != 6 {
		t.Fatalf("new message ids %v, want 6", more)
	}
	for idx := range 2 {
		h2 := &recorder{}
		r := f.service(Config{Mod: 2, ModIndex: idx}, h2)
		if _, err := r.RunOnce(f.ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range more {
			if got, want := h2.calls[id] > 0, store.Partition(id, 2) == idx; got != want {
				t.Errorf("replica %d of 2: handled message %d = %v, want %v", idx, id, got, want)
			}
		}
	}
	if n := f.unhandled(); n != 0 {
		t.Errorf("%d messages unhandled after both halves ran", n)
	}
}

func TestFailingHandlerRetried(t *testing.T) {
	f := setup(t)
	ids := f.send("progress", "<n>1</n>", "<n>2</n>")
	h := &recorder{fail: map[int64]int{ids[0]: 1}}
	svc := f.service(Config{}, h)
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.unhandled(); n != 1 {
		t.Fatalf("%d messages unhandled after one failed, want 1", n)
	}
	// Backing off: not tried again at once.
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if h.calls[ids[0]] != 1 {
		t.Errorf("failed message tried %d times before its back-off ended, want 1", h.calls[ids[0]])
	}
	f.now.Add(int64(RetryMin / time.Second))
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.unhandled(); n != 0 || h.calls[ids[0]] != 2 {
		t.Errorf("after the back-off: %d unhandled, failed message tried %d times; want 0 and 2", n, h.calls[ids[0]])
	}
}

func TestDeadlineExtended(t *testing.T) {
	f := setup(t)
	// Another host's task of the same name is not this message's.
	other := storetest.Host(t, f.st, storetest.HostOptions{CreateTime: 1, User: f.user.ID})
	done := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Name: "wu_b_0", Host: f.host.ID,
		User: f.user.ID, ServerState: state.ServerOver, ReportDeadline: t0 - 10})
	f.send("progress", "<cpu_time>5</cpu_time>")
	m := protocol.NewMsgFromHost(done.Name, t0, "progress", "")
	if _, err := f.st.MsgFromHostInsert(f.ctx, []row.MsgFromHost{{CreateTime: t0, HostID: f.host.ID, Variety: "progress",
		ResultName: done.Name, MD5: m.MD5(), XML: m.XML}}); err != nil {
		t.Fatal(err)
	}
	_ = other
	svc := f.service(Config{ExtendDeadline: time.Hour}, nil)
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Result(t, f.st, f.task.ID).ReportDeadline; got != t0+3600 {
		t.Errorf("in-progress task's deadline %d, want now + 1h = %d", got, t0+3600)
	}
	if got := storetest.Result(t, f.st, done.ID).ReportDeadline; got != t0-10 {
		t.Errorf("finished task's deadline moved to %d, want it left at %d", got, t0-10)
	}
	// A later trickle moves it on; an earlier "now" never moves it back.
	f.send("progress", "<cpu_time>6</cpu_time>")
	f.now.Add(600)
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Result(t, f.st, f.task.ID).ReportDeadline; got != t0+600+3600 {
		t.Errorf("deadline after a second trickle %d, want %d", got, t0+600+3600)
	}
}

func TestCommandHandler(t *testing.T) {
	f := setup(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := filepath.Join(dir, "h.sh")
	// Fails once per message (no mark file yet), then handles it: logs
	// its environment and input, and replies.
	body := "#!/bin/sh\nmark=\"" + dir + "/m$TASKSERVER_TRICKLE_ID\"\n" +
		"if [ ! -e \"$mark\" ]; then touch \"$mark\"; exit 3; fi\n" +
		"echo \"$TASKSERVER_TRICKLE_HOST_ID $TASKSERVER_TRICKLE_VARIETY $TASKSERVER_TRICKLE_RESULT_NAME\" >> " + log + "\n" +
		"cat >> " + log + "\n" +
		"echo '<slower/>' > \"$TASKSERVER_TRICKLE_REPLY\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	f.send("progress", "<cpu_time>7</cpu_time>")
	svc := f.service(Config{}, CommandHandler{Argv: []string{script}, Timeout: 10 * time.Second})
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.unhandled(); n != 1 {
		t.Fatalf("after the command failed, %d unhandled, want 1", n)
	}
	f.now.Add(int64(RetryMin / time.Second))
	if _, err := svc.RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.unhandled(); n != 0 {
		t.Fatalf("after the command succeeded, %d unhandled, want 0", n)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "progress wu_a_0") || !strings.Contains(string(got), "<cpu_time>7</cpu_time>") {
		t.Errorf("command saw %q, want the message's variety, task and text", got)
	}
	msgs, err := f.st.MsgToHostTake(f.ctx, f.host.ID, 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("queued trickle-downs %+v, %v; want the command's reply", msgs, err)
	}
	if !strings.Contains(msgs[0].XML, "<result_name>wu_a_0</result_name>") || !strings.Contains(msgs[0].XML, "<slower/>") {
		t.Errorf("trickle-down %q, want the reply to task wu_a_0", msgs[0].XML)
	}
}

func TestConfigRefusesNothingToDo(t *testing.T) {
	err := programConfig{Config: Config{Mod: 1, Batch: 1}, stock: true}.Validate()
	if err == nil || !strings.Contains(err.Error(), "--handler-cmd") {
		t.Errorf("stock program with nothing to do: %v, want a refusal naming --handler-cmd", err)
	}
	err = Config{Mod: 1, Batch: 1, CreditPerCPUSecond: 1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "--credit-max-cpu-seconds") {
		t.Errorf("credit without a cap: %v, want a refusal naming --credit-max-cpu-seconds", err)
	}
}

// twice replies twice to every message.
type twice struct{}

func (twice) Handle(context.Context, row.MsgFromHost) ([]Reply, error) {
	return []Reply{{Variety: "a", Body: "<n>1</n>"}, {Variety: "a", Body: "<n>2</n>"}}, nil
}

func TestRepliesToOneTaskHaveDistinctTimes(t *testing.T) {
	f := setup(t)
	f.send("progress", "<n>1</n>", "<n>2</n>")
	if _, err := f.service(Config{}, twice{}).RunOnce(f.ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := f.st.MsgToHostTake(f.ctx, f.host.ID, 10)
	if err != nil || len(msgs) != 4 {
		t.Fatalf("queued %d replies, %v; want 4", len(msgs), err)
	}
	// The client names the file in the slot directory by the time: one
	// time each, or a reply overwrites another before the app reads it.
	seen := map[string]bool{}
	for _, m := range msgs {
		i := strings.Index(m.XML, "<time>")
		tm := m.XML[i : i+strings.Index(m.XML[i:], "\n")]
		if seen[tm] {
			t.Errorf("two replies to one task with %s", tm)
		}
		seen[tm] = true
	}
}
