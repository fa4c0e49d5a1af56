// Command feeder keeps the host's shared-memory work cache full of unsent
// results for the schedulers on the same host, and publishes the static
// tables they need.
package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/feeder"
	"github.com/taskserver/taskserver/internal/shmcache"
)

const (
	flagSlots          = "slots"
	flagReclaimAfter   = "reclaim-after"
	flagTablesInterval = "tables-interval"
	flagRefillAt       = "refill-at"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[feeder.Config]{
		Name:   "feeder",
		Usage:  "keep the shared-memory cache of unsent results full for the schedulers of this host",
		Listen: "127.0.0.1:9103",
		// The cache must be refilled soon after schedulers drain it. A pass
		// that finds too few slots free reads only the shared memory, so
		// passes this frequent cost the database nothing.
		Sleep:      50 * time.Millisecond,
		Flags:      flags(),
		MaxDBConns: 2,
		Config: func(c *cli.Context, _ config.Common, loop config.Loop) feeder.Config {
			return feeder.Config{
				Mod:            loop.Mod,
				ModIndex:       loop.ModIndex,
				Batch:          loop.Batch,
				Slots:          c.Int(flagSlots),
				ReclaimAfter:   c.Duration(flagReclaimAfter),
				TablesInterval: c.Duration(flagTablesInterval),
				RefillAt:       c.Int(flagRefillAt),
			}
		},
		Build: func(c *cli.Context, cfg feeder.Config, env daemon.Env) (daemon.Service, func() error, error) {
			// The path is where the cache lives, not how the feeder fills
			// it: like the store's DSN, it is not in the Config.
			path, err := env.Common.ShmPath(c.String(config.FlagShmPath))
			if err != nil {
				return nil, nil, err
			}
			cache, err := shmcache.Create(path, cfg.Slots)
			if err != nil {
				return nil, nil, err
			}
			svc, err := feeder.New(cfg, feeder.Deps{Store: env.Store, Cache: cache, Log: env.Log, Metrics: feeder.NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, errors.Join(err, cache.Close())
			}
			feeder.RegisterBacklog(env.Registry, env.Store)
			env.Log.Info("feeding", "shm_path", cache.Path(), "slots", cache.NSlots())
			return svc, cache.Close, nil
		},
	})
}

// flags are the feeder's own flags, after the common and loop ones.
func flags() []cli.Flag {
	return []cli.Flag{
		config.ShmFlag(),
		&cli.IntFlag{Name: flagSlots, Value: 1000, Usage: "number of cache slots (unsent results held for the schedulers)",
			EnvVars: []string{config.EnvName(flagSlots)}},
		&cli.DurationFlag{Name: flagReclaimAfter, Value: 60 * time.Second,
			Usage:   "take back a slot a scheduler has held this long (sooner if the scheduler process is gone)",
			EnvVars: []string{config.EnvName(flagReclaimAfter)}},
		&cli.DurationFlag{Name: flagTablesInterval, Value: 10 * time.Second,
			Usage:   "reload platforms, apps and app versions this often, republishing them if they changed",
			EnvVars: []string{config.EnvName(flagTablesInterval)}},
		&cli.IntFlag{Name: flagRefillAt, Value: 0,
			Usage:   "query for unsent results once this many slots are empty (fewer wait up to a second); 0: a quarter of the slots, at most --batch",
			EnvVars: []string{config.EnvName(flagRefillAt)}},
	}
}
