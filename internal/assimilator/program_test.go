package assimilator

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNewHandlerSelection(t *testing.T) {
	t.Parallel()
	base := HandlerConfig{ResultsDir: "/p/results", UploadDir: "/p/upload", Fanout: 8}
	with := func(f func(*HandlerConfig)) HandlerConfig { c := base; f(&c); return c }
	for _, tc := range []struct {
		name    string
		cfg     HandlerConfig
		want    Handler
		wantErr string
	}{
		{"default is copy", base, &FileHandler{Dir: "/p/results", UploadDir: "/p/upload", Fanout: 8}, ""},
		{"explicit copy", with(func(c *HandlerConfig) { c.Kind = HandlerCopy }),
			&FileHandler{Dir: "/p/results", UploadDir: "/p/upload", Fanout: 8}, ""},
		{"a command alone selects command", with(func(c *HandlerConfig) { c.Command = "/bin/ingest --db x"; c.Timeout = time.Minute }),
			CommandHandler{Argv: []string{"/bin/ingest", "--db", "x"}, Timeout: time.Minute, UploadDir: "/p/upload", Fanout: 8}, ""},
		{"explicit command", with(func(c *HandlerConfig) { c.Kind = HandlerCommand; c.Command = "ingest" }),
			CommandHandler{Argv: []string{"ingest"}, UploadDir: "/p/upload", Fanout: 8}, ""},
		{"command without a program", with(func(c *HandlerConfig) { c.Kind = HandlerCommand; c.Command = "  " }),
			nil, "--handler command needs --handler-cmd"},
		{"copy with a command is a contradiction", with(func(c *HandlerConfig) { c.Kind = HandlerCopy; c.Command = "x" }),
			nil, "--handler-cmd is set but --handler is copy"},
		{"copy without a results directory", with(func(c *HandlerConfig) { c.ResultsDir = "" }),
			nil, "--results-dir is empty"},
		{"unknown kind", with(func(c *HandlerConfig) { c.Kind = "ftp" }), nil, `--handler "ftp"`},
		{"negative timeout", with(func(c *HandlerConfig) { c.Command = "x"; c.Timeout = -time.Second }),
			nil, "--handler-timeout -1s"},
	} {
		got, err := NewHandler(tc.cfg)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: NewHandler(%+v) error = %v, want one containing %q", tc.name, tc.cfg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: NewHandler(%+v) = %#v, %v; want %#v", tc.name, tc.cfg, got, err, tc.want)
		}
	}
}
