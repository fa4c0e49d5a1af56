package boincconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
)

// fixtureOldDir is where the fixture's config.xml says the project is.
const fixtureOldDir = "/home/boincadm/projects/ringsearch"

// oldProject copies the fixture project into a temporary directory,
// rewriting its absolute paths to point there, and gives it a key
// directory holding the keys a BOINC server has.
func oldProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"config.xml", "config_aux.xml", "plan_class_spec.xml"} {
		body, err := os.ReadFile(filepath.Join("testdata", "oldproject", name))
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.ReplaceAll(body, []byte(fixtureOldDir), []byte(dir))
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"upload_private", "upload_public", "code_sign_public", "code_sign_private"} {
		if err := os.WriteFile(filepath.Join(dir, "keys", k), []byte("key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const newDSN = "taskserver:pw@tcp(127.0.0.1:3306)/ringsearch_new"

// loadCommon runs a program's shared flags over the written file, as every
// program's Before hook does, and returns what its Config would hold.
func loadCommon(t *testing.T, path string) (config.Common, string) {
	t.Helper()
	var com config.Common
	var spec string
	app := &cli.App{
		Name:   "x",
		Flags:  append(config.CommonFlags("127.0.0.1:0"), config.PlanClassSpecFlag()),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			var err error
			com, err = config.CommonFrom(c)
			spec = c.String(config.FlagPlanClassSpec)
			return err
		},
	}
	if err := app.Run([]string{"x", "--config", path}); err != nil {
		t.Fatalf("loading %s with the shared flags: %v", path, err)
	}
	return com, spec
}

func TestConvertRealisticProject(t *testing.T) {
	t.Parallel()
	old := oldProject(t)
	newDir := filepath.Join(t.TempDir(), "new")
	out := filepath.Join(newDir, "project.yaml")
	rep, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN})
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("project file:\n%s\nreport:\n%s", body, text.String())
}
