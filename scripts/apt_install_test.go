// Package scripts holds the tests of the set-up scripts beside it; the
// scripts themselves are bash.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runAptInstall runs a copy of apt-install.sh in a scratch project
// directory in its dry mode and returns its stdout, stderr and log.
func runAptInstall(t *testing.T, root string, args ...string) (stdout, stderr, log string) {
	t.Helper()
	body, err := os.ReadFile("apt-install.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "apt-install.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, body, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "TASKSERVER_APT_DRY_RUN=1")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("apt-install.sh %q: %v\n%s", args, err, errOut.String())
	}
	b, err := os.ReadFile(filepath.Join(root, ".local", "apt.log"))
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), string(b)
}

// TestAptInstallPrintsOneLinePerPackageSet: a first run on a fresh machine
// used to print hundreds of lines of apt-get output; each package set is
// one line now, apt-get's output goes to .local/apt.log.
func TestAptInstallPrintsOneLinePerPackageSet(t *testing.T) {
	root := t.TempDir()
	stdout, stderr, log := runAptInstall(t, root, "gcc (go test -race needs cgo)", "gcc", "libc6-dev")
	if want := "installing gcc (go test -race needs cgo) (log: .local/apt.log)\n"; stderr != want || stdout != "" {
		t.Fatalf("stdout %q, stderr %q; want nothing and %q", stdout, stderr, want)
	}
	for _, want := range []string{"+ apt-get update\n", "+ apt-get install -y -q gcc libc6-dev\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("apt.log lacks %q:\n%s", want, log)
		}
	}

	// Lists updated a minute ago are not updated again for the next set.
	stamp := filepath.Join(root, ".local", "apt-updated")
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stamp, time.Now().Add(-time.Minute), time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, ".local", "apt.log")); err != nil {
		t.Fatal(err)
	}
	_, stderr, log = runAptInstall(t, root, "--no-install-recommends", "chromium", "chromium")
	if want := "installing chromium (log: .local/apt.log)\n"; stderr != want {
		t.Fatalf("stderr %q, want %q", stderr, want)
	}
	if !strings.Contains(log, "+ apt-get install -y -q --no-install-recommends chromium\n") {
		t.Errorf("apt.log lacks the install without recommends:\n%s", log)
	}
	lists, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*")
	if len(lists) > 0 && strings.Contains(log, "apt-get update") {
		t.Errorf("apt.log shows a second update within the hour:\n%s", log)
	}
}
