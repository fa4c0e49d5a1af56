// Command feeder keeps the host's shared-memory work cache full of unsent
// results for the schedulers on the same host, and publishes the static
// tables they need.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/feeder"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

const program = "feeder"

const (
	flagSlots          = "slots"
	flagReclaimAfter   = "reclaim-after"
	flagTablesInterval = "tables-interval"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:   program,
		Usage:  "keep the shared-memory cache of unsent results full for the schedulers of this host",
		Flags:  flags(),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			slots := c.Int(flagSlots)
			var ferr error
			if slots < 1 || slots > shmcache.MaxSlots {
				ferr = fmt.Errorf("--%s %d: want 1..%d", flagSlots, slots, shmcache.MaxSlots)
			}
			if d := c.Duration(flagReclaimAfter); d < time.Second {
				ferr = errors.Join(ferr, fmt.Errorf("--%s %s: want at least 1s", flagReclaimAfter, d))
			}
			if d := c.Duration(flagTablesInterval); d <= 0 {
				ferr = errors.Join(ferr, fmt.Errorf("--%s %s: want a positive duration", flagTablesInterval, d))
			}
			if err := errors.Join(err, lerr, ferr); err != nil {
				return err
			}
			log := daemon.NewLogger(program, cfg.LogLevel)
			reg := daemon.NewRegistry(program)
			st, err := store.Open(ctx, cfg.DBDSN, store.Options{MaxOpenConns: 2})
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.SchemaCheck(ctx); err != nil {
				return err
			}
			cache, err := shmcache.Create(c.String(config.FlagShmPath), slots)
			if err != nil {
				return err
			}
			defer cache.Close()
			svc := feeder.New(st, cache, feeder.Config{
				Mod:            loop.Mod,
				ModIndex:       loop.ModIndex,
				Batch:          loop.Batch,
				ReclaimAfter:   c.Duration(flagReclaimAfter),
				TablesInterval: c.Duration(flagTablesInterval),
			}, log, reg)
			log.Info("feeding", "shm_path", cache.Path(), "slots", cache.NSlots())
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}

// flags are the common and loop flags, with a short idle sleep (the cache
// must be refilled soon after schedulers drain it), and the feeder's own.
func flags() []cli.Flag {
	loop := config.LoopFlags()
	for _, f := range loop {
		if d, ok := f.(*cli.DurationFlag); ok && d.Name == config.FlagSleep {
			d.Value = 200 * time.Millisecond
		}
	}
	fs := append(config.CommonFlags("127.0.0.1:9103"), loop...)
	return append(fs,
		config.ShmFlag(),
		&cli.IntFlag{Name: flagSlots, Value: 1000, Usage: "number of cache slots (unsent results held for the schedulers)",
			EnvVars: []string{config.EnvName(flagSlots)}},
		&cli.DurationFlag{Name: flagReclaimAfter, Value: 60 * time.Second,
			Usage:   "take back a slot a scheduler has held this long (sooner if the scheduler process is gone)",
			EnvVars: []string{config.EnvName(flagReclaimAfter)}},
		&cli.DurationFlag{Name: flagTablesInterval, Value: 10 * time.Second,
			Usage:   "reload platforms, apps and app versions this often, republishing them if they changed",
			EnvVars: []string{config.EnvName(flagTablesInterval)}},
	)
}
