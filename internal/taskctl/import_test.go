package taskctl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/boincimport/boincconfig"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/store/boinctest"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestImportBoincCommand runs taskctl import boinc as an operator would:
// a dry run that writes nothing (and prints the project file converted
// from the BOINC project's config.xml), the import (app files linked from
// the BOINC project's download directory into ours, the project file
// written, mode 0600), and the verification, which fails once the
// databases differ; a second conversion refuses to overwrite the project
// file without --force, before importing anything.
func TestImportBoincCommand(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	oldDSN, oldName := boinctest.NewDatabase(t)
	boincDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(boincDir, "download"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := boinctest.Project{Users: 12, Hosts: 15, Teams: 3, Jobs: 4, Finished: 2, Now: 1_700_000_000, Fanout: 16,
		DownloadURL: "http://old.example.org/dl", UploadURL: "http://old.example.org/ul", DownloadDir: filepath.Join(boincDir, "download")}
	if err := boinctest.Fill(context.Background(), oldDSN, p); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.xml", "config_aux.xml", "plan_class_spec.xml"} {
		data, err := os.ReadFile(filepath.Join("..", "boincimport", "boincconfig", "testdata", "oldproject", f))
		if err == nil {
			err = os.WriteFile(filepath.Join(boincDir, f), data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	projectFile := filepath.Join(t.TempDir(), "project.yaml")
	from := boinctest.ReadOnlyDSN(t, oldDSN, oldName)
	args := []string{"import", "boinc", "--from", from, "--boinc-project-dir", boincDir, "--boinc-download-url", p.DownloadURL,
		"--project-file", projectFile}

	out := b.mustRun(t, append(args, "--dry-run")...)
	for _, want := range []string{"dry run: nothing was written", "WOULD IMPORT", "finished BOINC jobs not imported (assimilated, failed, or validated and waiting for BOINC's assimilator): 2",
		"project file " + projectFile + " would be:", "url-base:", "Carried over"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if !hasRow(out, "user", "12", "0", "12", "0", "0") || !hasRow(out, "result", "20", "0", "20", "0", "0") {
		t.Errorf("dry run table wrong:\n%s", out)
	}
	var n int
	if err := b.st.DB().QueryRow("SELECT (SELECT COUNT(*) FROM user) + (SELECT COUNT(*) FROM host) + (SELECT COUNT(*) FROM workunit)").Scan(&n); err != nil || n != 0 {
		t.Fatalf("dry run wrote %d rows (%v)", n, err)
	}
	if _, err := os.Stat(projectFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dry run wrote the project file (%v)", err)
	}

	out = b.mustRun(t, args...)
	if !hasRow(out, "host", "15", "0", "15", "0", "0") || !hasRow(out, "workunit", "12", "0", "12", "0", "0") {
		t.Errorf("import table wrong:\n%s", out)
	}
	if fi, err := os.Stat(projectFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("project file after the import: %v, %v; want mode 0600", fi, err)
	}
	if data, _ := os.ReadFile(projectFile); !strings.Contains(string(data), "url-base:") {
		t.Errorf("project file lacks url-base:\n%s", data)
	}
	if _, _, err := b.run(t, args...); !errors.Is(err, boincconfig.ErrExists) {
		t.Errorf("second conversion without --force: %v, want ErrExists", err)
	}
	name := boinctest.AppFileName(boinctest.PlatformID1, 710)
	if _, err := os.Stat(filepath.Join(b.projectDir, "download", fanout.Dir(name, 16), name)); err != nil {
		t.Errorf("app file not in our download directory: %v\n%s", err, out)
	}

	out = b.mustRun(t, "import", "boinc", "--from", from, "--verify")
	if strings.Count(out, " ok\n") != 6 {
		t.Errorf("verify output:\n%s", out)
	}
	storetest.Exec(t, b.st, "UPDATE host SET total_credit = total_credit + 1 WHERE id = 2")
	out, _, err := b.run(t, "import", "boinc", "--from", from, "--verify")
	if !errors.Is(err, boincimport.ErrMismatch) || !strings.Contains(out, "MISMATCH") {
		t.Errorf("verify after a host's credit changed: %v\n%s", err, out)
	}
}

// hasRow reports whether out has a line of exactly these fields, separated by
// spaces.
func hasRow(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(l), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}
