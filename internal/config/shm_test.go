package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// shmPathOf parses args as a program with the common and shm flags does
// and returns the cache path it would use.
func shmPathOf(t *testing.T, args ...string) string {
	t.Helper()
	var path string
	app := &cli.App{
		Name:   "x",
		Flags:  append(CommonFlags(""), ShmFlag()),
		Before: LoadFile,
		Action: func(c *cli.Context) error {
			com, err := CommonFrom(c)
			if err != nil {
				return err
			}
			path, err = com.ShmPath(c.String(FlagShmPath))
			return err
		},
	}
	if err := app.Run(append([]string{"x"}, args...)); err != nil {
		t.Fatalf("run %q: %v", args, err)
	}
	return path
}

// TestShmPathIsOnePerProject: two checkouts on one machine (directories
// of the same name, as two clones are) must not share a cache file, while
// the programs of one project, whichever way they spell its directory,
// must.
func TestShmPathIsOnePerProject(t *testing.T) {
	base := t.TempDir()
	a := filepath.Join(base, "one", "checkout")
	b := filepath.Join(base, "two", "checkout")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := shmPathOf(t, "--project-dir", a), shmPathOf(t, "--project-dir", b)
	if pa == pb {
		t.Fatalf("projects %s and %s share the cache file %s", a, b, pa)
	}
	if !strings.HasPrefix(pa, "/dev/shm/taskserver-checkout-") {
		t.Errorf("cache file %s: want /dev/shm/taskserver-checkout-<hash>", pa)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(base, "one"))
	for _, dir := range []string{"checkout", "./checkout/", link} {
		if p := shmPathOf(t, "--project-dir", dir); p != pa {
			t.Errorf("--project-dir %s: cache file %s, want %s as for %s", dir, p, pa, a)
		}
	}
	// An explicit path wins; a relative one is under the project directory.
	if p := shmPathOf(t, "--project-dir", a, "--shm-path", "/dev/shm/mine"); p != "/dev/shm/mine" {
		t.Errorf("--shm-path /dev/shm/mine: cache file %s", p)
	}
	if p := shmPathOf(t, "--project-dir", a, "--shm-path", "cache"); p != filepath.Join(a, "cache") {
		t.Errorf("--shm-path cache: cache file %s, want %s", p, filepath.Join(a, "cache"))
	}
}
