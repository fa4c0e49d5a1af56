package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/store/boinctest"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestImportBoincKilledAndResumed kills `taskctl import boinc` (SIGKILL)
// while it copies a generated BOINC project, runs it again, and finds
// every row once: the verification passes and the BOINC database is as it
// was.
func TestImportBoincKilledAndResumed(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := t.TempDir()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin+"/", "./cmd/taskctl")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/taskctl: %v\n%s", err, out)
	}
	taskctl := filepath.Join(bin, "taskctl")

	const users, hosts, jobs = 20000, 20000, 500
	oldDSN, oldName := boinctest.NewDatabase(t)
	ctx := context.Background()
	oldDownload := t.TempDir()
	if err := boinctest.Fill(ctx, oldDSN, boinctest.Project{Users: users, Hosts: hosts, Teams: 100, Jobs: jobs, Finished: 50,
		Now: time.Now().Unix(), DownloadURL: "http://old.example.org/dl", UploadURL: "http://old.example.org/ul", Fanout: 1024,
		DownloadDir: oldDownload}); err != nil {
		t.Fatal(err)
	}
	from := boinctest.ReadOnlyDSN(t, oldDSN, oldName)
	old, err := sql.Open("mysql", oldDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	before := checksums(t, old)

	ourDSN := storetest.NewDatabase(t)
	ours, err := sql.Open("mysql", ourDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	project := t.TempDir()
	args := []string{"--db-dsn", ourDSN, "--project-dir", project, "import", "boinc", "--from", from, "--chunk", "200",
		"--boinc-download-dir", oldDownload}

	run := exec.Command(taskctl, args...)
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	var atKill int
	for {
		if err := ours.QueryRow("SELECT COUNT(*) FROM host").Scan(&atKill); err != nil {
			t.Fatal(err)
		}
		if atKill >= hosts/4 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the import ended (%v) at %d hosts before it was killed\n%s", err, atKill, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the import wrote %d hosts in 2 minutes\n%s", atKill, out.String())
		}
	}
	if err := run.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	var left int
	if err := ours.QueryRow("SELECT COUNT(*) FROM host").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left >= hosts {
		t.Fatalf("the import finished (%d hosts) before it was killed; the test needs a larger project\n%s", left, out.String())
	}

	again, err := exec.Command(taskctl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("import after the kill: %v\n%s", err, again)
	}
	for table, want := range map[string]int{"user": users, "host": hosts, "team": 100, "workunit": 3 * jobs, "result": 5 * jobs, "job_template": 1} {
		var n int
		if err := ours.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("after kill (at %d hosts) and rerun: %d rows in %s, want %d\n%s", atKill, n, table, want, again)
		}
	}
	verify, err := exec.Command(taskctl, "--db-dsn", ourDSN, "--project-dir", project, "import", "boinc", "--from", from, "--verify").CombinedOutput()
	if err != nil || strings.Contains(string(verify), "MISMATCH") {
		t.Errorf("verify after the resumed import: %v\n%s", err, verify)
	}
	after := checksums(t, old)
	for table, sum := range before {
		if after[table] != sum {
			t.Errorf("BOINC table %s changed: checksum %d, was %d", table, after[table], sum)
		}
	}
}

func checksums(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range boinctest.Tables {
		var name string
		var sum int64
		if err := db.QueryRow("CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
			t.Fatal(err)
		}
		out[table] = sum
	}
	return out
}
