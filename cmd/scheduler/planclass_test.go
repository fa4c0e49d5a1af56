package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
)

const twoClasses = `<plan_classes><plan_class><name>mt</name><max_threads>4</max_threads></plan_class>
<plan_class><name>cuda</name><gpu_type>nvidia</gpu_type></plan_class></plan_classes>`

// TestLoadPlanClasses is not parallel: it runs cli apps (the urfave/cli
// help flag race).
func TestLoadPlanClasses(t *testing.T) {
	load := func(args ...string) (*planclass.Specs, error) {
		var specs *planclass.Specs
		var lerr error
		app := &cli.App{Name: "t", Flags: append(config.CommonFlags(""), config.PlanClassSpecFlag()), Before: config.LoadFile,
			Action: func(c *cli.Context) error {
				cfg, err := config.CommonFrom(c)
				if err != nil {
					return err
				}
				specs, lerr = loadPlanClasses(c, cfg)
				return nil
			}}
		if err := app.Run(append([]string{"t"}, args...)); err != nil {
			t.Fatal(err)
		}
		return specs, lerr
	}
	dir := t.TempDir()
	// No file where the default points: no plan classes, no error.
	if s, err := load("--project-dir", dir); s != nil || err != nil {
		t.Fatalf("default file missing: %v, %v; want nil, nil", s, err)
	}
	if err := os.WriteFile(filepath.Join(dir, planclass.DefaultFile), []byte(twoClasses), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := load("--project-dir", dir); err != nil || !slices.Equal(s.Names(), []string{"mt", "cuda"}) {
		t.Fatalf("default file: %v, %v; want mt and cuda", s.Names(), err)
	}
	// Named in the project's config file, relative to the project dir.
	other := filepath.Join(dir, "other.xml")
	if err := os.WriteFile(other, []byte(`<plan_classes><plan_class><name>avx</name><cpu_feature>avx</cpu_feature></plan_class></plan_classes>`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "project.yaml")
	if err := os.WriteFile(cfgFile, []byte("plan-class-spec: other.xml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := load("--config", cfgFile, "--project-dir", dir); err != nil || !slices.Equal(s.Names(), []string{"avx"}) {
		t.Fatalf("config file key: %v, %v; want avx", s.Names(), err)
	}
	// Named explicitly and missing: an error.
	if _, err := load("--project-dir", dir, "--plan-class-spec", "nope.xml"); !errors.Is(err, os.ErrNotExist) ||
		!strings.Contains(err.Error(), "--plan-class-spec") {
		t.Fatalf("missing named file: %v, want a not-exist error naming the flag", err)
	}
}

// A file that does not parse stops the scheduler before it serves, with
// the file and the problem. Not parallel: it runs a cli app.
func TestRunRefusesBadPlanClassSpec(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, planclass.DefaultFile)
	if err := os.WriteFile(path, []byte(`<plan_classes><plan_class><name>cuda</name><gpu_type>nvidia</gpu_type><min_cuda_verison>1</min_cuda_verison></plan_class></plan_classes>`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"scheduler", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--project-dir", dir})
	if err == nil {
		t.Fatal("run with a bad plan_class_spec.xml = nil, want an error")
	}
	for _, w := range []string{"--plan-class-spec", path, `"cuda"`, "<min_cuda_verison>"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("run with a bad plan_class_spec.xml = %q, want it to contain %s", err, w)
		}
	}
}
