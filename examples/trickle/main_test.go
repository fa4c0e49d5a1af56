package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/trickle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProgressRecordedAndAskAnswered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := ProgressHandler{Dir: dir}
	ctx := context.Background()
	for _, m := range []trickle.Message{
		{ResultName: "wu_1_0", Variety: "progress", XML: "<variety>progress</variety>\n<fraction_done>0.25</fraction_done>"},
		{ResultName: "wu_1_0", Variety: "progress", XML: "<variety>progress</variety>\n<fraction_done>0.5</fraction_done>"},
	} {
		if replies, err := h.Handle(ctx, m); err != nil || len(replies) != 0 {
			t.Fatalf("Handle(progress) = %v, %v; want no reply", replies, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "wu_1_0")); err != nil || string(got) != "0.5\n" {
		t.Errorf("progress file %q, %v; want the latest, 0.5", got, err)
	}
	replies, err := h.Handle(ctx, trickle.Message{ResultName: "wu_1_0", Variety: "ask", XML: "<variety>ask</variety>"})
	if err != nil || len(replies) != 1 || replies[0].Body != "<go_on/>" {
		t.Errorf("Handle(ask) = %v, %v; want one <go_on/> reply", replies, err)
	}
	// A name that would leave the directory is not used.
	if _, err := h.Handle(ctx, trickle.Message{ResultName: "../x", XML: "<fraction_done>1</fraction_done>"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x")); err == nil {
		t.Error("a task name with ../ wrote outside the progress directory")
	}
}
