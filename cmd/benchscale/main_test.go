package main

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/scalebench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// parse runs the command line on args and returns the options it made.
func parse(t *testing.T, args ...string) (scalebench.Options, error) {
	t.Helper()
	var o scalebench.Options
	var err error
	app := newApp(func(c *cli.Context) error {
		o, err = options(c)
		return nil
	})
	if runErr := app.Run(append([]string{"benchscale"}, args...)); runErr != nil {
		t.Fatalf("run %v: %v", args, runErr)
	}
	return o, err
}

// TestPoolsFlag checks --pools makes a sweep, smallest pool first, and that
// without it the run is today's: one pool, --buffer-pool's.
func TestPoolsFlag(t *testing.T) {
	o, err := parse(t, "--scale", "100000", "--pools", "4G, 256M 1G")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"256M", "1G", "4G"}; !slices.Equal(o.Pools, want) {
		t.Errorf("pools = %q, want %q", o.Pools, want)
	}
	o, err = parse(t, "--scale", "100000 1e6", "--pools", "", "--buffer-pool", "2G")
	if err != nil {
		t.Fatal(err)
	}
	if o.Pools != nil || o.BufferPool != "2G" || !slices.Equal(o.Sizes, []int64{100000, 1000000}) {
		t.Errorf("no sweep: pools %q, buffer pool %q, sizes %v; want none, 2G, [100000 1000000]", o.Pools, o.BufferPool, o.Sizes)
	}
	o, err = parse(t)
	if err != nil || o.Pools != nil || o.BufferPool != "1G" {
		t.Errorf("defaults: pools %q, buffer pool %q, %v; want none, 1G", o.Pools, o.BufferPool, err)
	}
	for _, bad := range []string{"1X", "256M 0.25G", "1G 1024M", "1K"} {
		if _, err := parse(t, "--pools", bad); err == nil {
			t.Errorf("--pools %q: no error", bad)
		}
	}
}
