package taskctl_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/statsexport"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestStatsExportWritesTheDump(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	u := storetest.User(t, b.st, storetest.UserOptions{TotalCredit: 7, CrossProjectID: "x"})
	storetest.Host(t, b.st, storetest.HostOptions{User: u.ID, TotalCredit: 7})

	out := b.mustRun(t, "stats", "export", "--out", "pub/stats")
	dir := filepath.Join(b.projectDir, "pub", "stats")
	if !strings.Contains(out, dir) || !strings.Contains(out, "1 users, 0 teams, 1 hosts") {
		t.Errorf("stats export printed %q, want the directory and 1 user, 0 teams, 1 host", out)
	}
	last, ok, err := statsexport.LastUpdate(dir)
	if err != nil || !ok || !last.Equal(b.now) {
		t.Errorf("the dump's update_time is %v (ok %v, %v), want the command's clock %v", last, ok, err, b.now)
	}
	// Run again at once: unlike the daemon, the command always dumps.
	b.now = b.now.Add(time.Second)
	b.mustRun(t, "stats", "export", "--out", "pub/stats")
	if last, _, _ := statsexport.LastUpdate(dir); !last.Equal(b.now) {
		t.Errorf("a second export left update_time %v, want %v", last, b.now)
	}
	if _, _, err := b.run(t, "stats", "export", "--batch", "0"); err == nil || !strings.Contains(err.Error(), "--batch") {
		t.Errorf("stats export --batch 0: %v, want an error naming --batch", err)
	}
}
