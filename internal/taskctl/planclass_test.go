package taskctl_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/store/storetest"
)

const planClassFile = `<plan_classes>
  <plan_class><name>mt</name><max_threads>8</max_threads></plan_class>
  <plan_class><name>cuda</name><gpu_type>nvidia</gpu_type><cuda/></plan_class>
  <plan_class><name>vbox</name><virtualbox/></plan_class>
</plan_classes>
`

// app-version add stores a plan class only when the project's
// plan_class_spec.xml defines it, in a form the scheduler can evaluate.
func TestAppVersionAddPlanClass(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	b.mustRun(t, "platform", "add", "--name", "x86_64-pc-linux-gnu")
	b.mustRun(t, "app", "add", "--name", "demo")
	add := func(extra ...string) (string, error) {
		args := append([]string{"app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu"}, extra...)
		_, _, err := b.run(t, args...)
		if err != nil {
			return err.Error(), err
		}
		return "", nil
	}
	mustFail := func(want []string, extra ...string) {
		t.Helper()
		msg, err := add(extra...)
		if err == nil {
			t.Fatalf("app-version add %v succeeded, want an error", extra)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("app-version add %v = %q, want it to contain %q", extra, msg, w)
			}
		}
	}
	specPath := filepath.Join(b.projectDir, "plan_class_spec.xml")

	// No file: no plan class is defined.
	mustFail([]string{`"mt"`, specPath, "does not exist"}, "--version-num", "1", "--plan-class", "mt")
	// A plain CPU version needs no file.
	if _, err := add("--version-num", "2"); err != nil {
		t.Fatalf("plain version without a plan class file: %v", err)
	}

	if err := os.WriteFile(specPath, []byte(planClassFile), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail([]string{`"cuda_fermi"`, "not defined", specPath, "mt, cuda, vbox"}, "--version-num", "3", "--plan-class", "cuda_fermi")
	mustFail([]string{`"vbox"`, "<virtualbox>", "VirtualBox", "no host"}, "--version-num", "4", "--plan-class", "vbox")
	if _, err := add("--version-num", "5", "--plan-class", "cuda"); err != nil {
		t.Fatalf("defined class cuda: %v", err)
	}

	// The file may be named by the project's config file, relative to
	// the project directory; an explicitly named file must exist.
	other := filepath.Join(b.projectDir, "classes.xml")
	if err := os.WriteFile(other, []byte(`<plan_classes><plan_class><name>avx</name><cpu_feature>avx</cpu_feature></plan_class></plan_classes>`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(b.projectDir, "project.yaml")
	// The scheduler's code-sign-key (a public key) must not reach this
	// command, whose --code-sign-key is a private key.
	if err := os.WriteFile(cfgFile, []byte("plan-class-spec: classes.xml\ncode-sign-key: keys/code_sign_public\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.run(t, "--config", cfgFile, "app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu",
		"--version-num", "6", "--plan-class", "avx"); err != nil {
		t.Fatalf("class from the config file's plan-class-spec: %v", err)
	}
	_, _, err := b.run(t, "--config", cfgFile, "app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu",
		"--version-num", "7", "--plan-class", "mt")
	if err == nil || !strings.Contains(err.Error(), other) {
		t.Fatalf("class not in the config file's plan-class-spec = %v, want not defined in %s", err, other)
	}
	mustFail([]string{"--plan-class-spec", "nope.xml"}, "--version-num", "8", "--plan-class", "mt", "--plan-class-spec", "nope.xml")
	bad := filepath.Join(b.projectDir, "bad.xml")
	if err := os.WriteFile(bad, []byte(`<plan_classes><plan_class><name>mt</name><bogus/></plan_class></plan_classes>`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail([]string{"--plan-class-spec", "<bogus>", bad}, "--version-num", "9", "--plan-class", "mt", "--plan-class-spec", bad)

	avs, err := b.st.AppVersionList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, v := range avs {
		got[v.VersionNum] = v.PlanClass
	}
	if len(got) != 3 || got[2] != "" || got[5] != "cuda" || got[6] != "avx" {
		t.Errorf("stored versions (num: plan class) = %v, want 2:\"\", 5:cuda, 6:avx only", got)
	}
}
