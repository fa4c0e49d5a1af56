package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// schemaPrograms are the programs that open the database, with the flags
// each needs to get as far as its schema check.
var schemaPrograms = []struct {
	name string
	args []string
}{
	{"scheduler", []string{"--addr", "127.0.0.1:0", "--listen", "127.0.0.1:0"}},
	{"feeder", []string{"--listen", "127.0.0.1:0"}},
	{"transitioner", []string{"--listen", "127.0.0.1:0", "--mod", "2", "--mod-index", "1"}},
	{"validator", []string{"--listen", "127.0.0.1:0"}},
	{"assimilator", []string{"--listen", "127.0.0.1:0", "--results-dir", "results"}},
	{"file_deleter", []string{"--listen", "127.0.0.1:0"}},
	{"db_purge", []string{"--listen", "127.0.0.1:0", "--archive-dir", "archives"}},
	{"db_dump", []string{"--listen", "127.0.0.1:0"}},
	{"trickle_handler", []string{"--listen", "127.0.0.1:0", "--extend-deadline", "1h"}},
	{"work_generator", []string{"--listen", "127.0.0.1:0", "--unsent-target", "10", "--total-jobs", "10",
		"--delay-bound", "1h", "--min-quorum", "1", "--target-nresults", "1", "--rsc-fpops-est", "1e10"}},
}

// TestBinariesRefuseAnotherSchemaVersion starts every daemon and the
// scheduler against a database whose schema is newer than theirs, then
// older, and checks each exits at once with the message that says which
// side to upgrade.
func TestBinariesRefuseAnotherSchemaVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := t.TempDir()
	pkgs := []string{"./cmd/taskctl"}
	for _, p := range schemaPrograms {
		pkgs = append(pkgs, "./cmd/"+p.name)
	}
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"build", "-o", bin + "/"}, pkgs...)...)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cfg, err := mysql.ParseDSN(storetest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var r [4]byte
	_, _ = rand.Read(r[:])
	dbName := "tse2e_schema_" + hex.EncodeToString(r[:])
	if _, err := admin.Exec("CREATE DATABASE " + dbName); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, dbName) })
	cfg.DBName = dbName

	projectDir := t.TempDir()
	configPath := filepath.Join(projectDir, "project.yaml")
	conf := fmt.Sprintf("db-dsn: %q\nproject-dir: %q\nshm-path: %q\napp: demo\nurl-base: http://127.0.0.1:1\n",
		cfg.FormatDSN(), projectDir, filepath.Join(projectDir, "shm"))
	if err := os.WriteFile(configPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(program string, args ...string) (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, filepath.Join(bin, program), append([]string{"--config", configPath}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if cctx.Err() != nil {
			return stderr.String(), fmt.Errorf("%s did not exit within 60 s", program)
		}
		return stderr.String(), err
	}
	for _, args := range [][]string{{"keys", "generate", "--pair", "upload_ed25519"}, {"schema", "upgrade"}} {
		if out, err := run("taskctl", args...); err != nil {
			t.Fatalf("taskctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	latest := schema.Latest()
	check := func(want string) {
		t.Helper()
		for _, p := range schemaPrograms {
			out, err := run(p.name, p.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, want) {
				t.Errorf("%s %s: %v, stderr:\n%s\nwant exit status 1 and %q", p.name, strings.Join(p.args, " "), err, out, want)
			}
		}
	}
	if _, err := admin.Exec("INSERT INTO "+dbName+".schema_version (version, name, applied_at) VALUES (?, 'future.sql', 0)",
		latest+1); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("database is at version %d, this binary knows up to %d: database schema is newer than this binary (upgrade the binaries)",
		latest+1, latest))
	if _, err := admin.Exec("DELETE FROM "+dbName+".schema_version WHERE version >= ?", latest); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("database is at version %d, this binary needs %d: database schema is older than this binary (run taskctl schema upgrade)",
		latest-1, latest))
}
