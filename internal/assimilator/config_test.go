package assimilator

import "testing"

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{App: "demo", Mod: 1, Batch: 500}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*Config)
		want  string
	}{
		{"app", func(c *Config) { c.App = "" },
			"--app is missing: name the app whose finished jobs to handle (or set TASKSERVER_APP, or app: in --config)"},
		{"scan pages", func(c *Config) { c.ScanPages = -1 }, "scan pages -1: want 0 (the default) or more"},
		{"mod", func(c *Config) { c.Mod = -1 }, "--mod -1: want at least 1"},
		{"mod index", func(c *Config) { c.Mod, c.ModIndex = 2, 5 }, "--mod-index 5: want 0 <= mod-index < mod (2)"},
		{"batch", func(c *Config) { c.Batch = -3 }, "--batch -3: want at least 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := New(cfg, Deps{Handler: &FileHandler{}}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	all := Config{ScanPages: -1}
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 4 {
		t.Errorf("Validate(%+v) = %v, want all 4 problems at once", all, err)
	}
	if _, err := New(valid, Deps{}); err == nil {
		t.Errorf("New(%+v) with no handler succeeded, want an error", valid)
	}
}
