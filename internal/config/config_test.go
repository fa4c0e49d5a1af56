package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// runApp parses args with the common and loop flags and returns what the
// action saw.
func runApp(t *testing.T, args []string, env map[string]string) (Common, Loop, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var com Common
	var loop Loop
	app := &cli.App{
		Name:   "x",
		Flags:  append(CommonFlags("127.0.0.1:9999"), LoopFlags()...),
		Before: LoadFile,
		Action: func(c *cli.Context) error {
			var err error
			if com, err = CommonFrom(c); err != nil {
				return err
			}
			loop, err = LoopFrom(c)
			return err
		},
	}
	err := app.Run(append([]string{"x"}, args...))
	return com, loop, err
}

// Not parallel: t.Setenv.
func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "project.yaml")
	body := "db-dsn: u@tcp(file:3306)/db\nmod: 4\nmod-index: 3\nsleep: 2s\nproject-dir: /srv/p\nunknown-key: ignored\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	com, loop, err := runApp(t, []string{"--config", path, "--mod-index", "1"}, map[string]string{"TASKSERVER_MOD": "2"})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if com.DBDSN != "u@tcp(file:3306)/db" {
		t.Errorf("db-dsn = %q, want the file's value", com.DBDSN)
	}
	if loop.Mod != 2 {
		t.Errorf("mod = %d, want 2 from the environment over the file's 4", loop.Mod)
	}
	if loop.ModIndex != 1 {
		t.Errorf("mod-index = %d, want 1 from the flag", loop.ModIndex)
	}
	if loop.Sleep != 2*time.Second {
		t.Errorf("sleep = %s, want 2s from the file", loop.Sleep)
	}
	if com.DownloadDir != "/srv/p/download" {
		t.Errorf("download dir = %q, want it resolved under the project dir", com.DownloadDir)
	}
	if loop.PassTimeout != DefaultPassTimeout {
		t.Errorf("pass-timeout = %s, want the default %s", loop.PassTimeout, DefaultPassTimeout)
	}
	if com.Listen != "127.0.0.1:9999" {
		t.Errorf("listen = %q, want the default", com.Listen)
	}
}

func TestValidationRejectsBadValues(t *testing.T) {
	cases := [][]string{
		{"--log-level", "loud"},
		{"--fanout", "0"},
		{"--sleep", "0s"},
		{"--pass-timeout", "0s"},
	}
	for _, args := range cases {
		if _, _, err := runApp(t, args, nil); err == nil {
			t.Errorf("args %v accepted, want a validation error", args)
		}
	}
}

func TestCheckPartition(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mod, modIndex, batch int
		want                 string // "" is valid
	}{
		{1, 0, 1, ""},
		{4, 3, 500, ""},
		{0, 0, 1, "--mod 0: want at least 1"},
		{2, 2, 1, "--mod-index 2: want 0 <= mod-index < mod (2)"},
		{2, -1, 1, "--mod-index -1: want 0 <= mod-index < mod (2)"},
		{1, 0, 0, "--batch 0: want at least 1"},
	}
	for _, tc := range cases {
		err := errors.Join(CheckPartition(tc.mod, tc.modIndex, tc.batch)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckPartition(%d, %d, %d) = %v, want nil", tc.mod, tc.modIndex, tc.batch, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("CheckPartition(%d, %d, %d) = %v, want %q", tc.mod, tc.modIndex, tc.batch, err, tc.want)
		}
	}
}

func TestParseRejectsNestedValues(t *testing.T) {
	t.Parallel()
	if _, err := Parse([]byte("db-dsn:\n  nested: x\n")); err == nil {
		t.Fatal("Parse accepted a nested mapping")
	}
	if _, err := Parse([]byte("a: [1,2")); err == nil {
		t.Fatal("Parse accepted broken YAML")
	}
	got, err := Parse([]byte("a: 1\nb: true\nc: x\nd: 1.5\n"))
	if err != nil || got["a"] != "1" || got["b"] != "true" || got["c"] != "x" || got["d"] != "1.5" {
		t.Fatalf("Parse = %v, %v", got, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("db-dsn: x\nmod: 2\n"))
	f.Add([]byte("a: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b)
	})
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	if got := EnvName("db-dsn"); got != "TASKSERVER_DB_DSN" {
		t.Fatalf("EnvName(db-dsn) = %q", got)
	}
}

// LoadFileKeys applies only the keys named: a subcommand's flag that
// shares a name with another program's keeps its default.
func TestLoadFileKeysAppliesOnlyThoseKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "project.yaml")
	if err := os.WriteFile(path, []byte("plan-class-spec: classes.xml\ncode-sign-key: keys/code_sign_public\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var spec, key string
	app := &cli.App{Name: "x", Flags: []cli.Flag{&cli.StringFlag{Name: FlagConfig}}, Commands: []*cli.Command{{
		Name:   "add",
		Flags:  []cli.Flag{PlanClassSpecFlag(), &cli.StringFlag{Name: "code-sign-key"}},
		Before: LoadFileKeys(FlagPlanClassSpec),
		Action: func(c *cli.Context) error {
			spec, key = c.String(FlagPlanClassSpec), c.String("code-sign-key")
			return nil
		},
	}}}
	if err := app.Run([]string{"x", "--config", path, "add"}); err != nil {
		t.Fatal(err)
	}
	if spec != "classes.xml" || key != "" {
		t.Errorf("plan-class-spec %q, code-sign-key %q; want the file's classes.xml and no key", spec, key)
	}
	if err := app.Run([]string{"x", "--config", path, "add", "--plan-class-spec", "mine.xml"}); err != nil || spec != "mine.xml" {
		t.Errorf("flag over file: plan-class-spec %q, %v; want mine.xml", spec, err)
	}
}
