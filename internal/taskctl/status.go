package taskctl

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/httpserve"
	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/store"
)

// Status is what "taskctl status --json" prints: the status page's JSON.
type Status = statuspage.Status

// ResultCount is the number of results in one state and outcome.
type ResultCount = statuspage.ResultCount

// WorkunitCounts are the job queues.
type WorkunitCounts = statuspage.WorkunitCounts

// ResultFileCounts are the results' file-deletion queues.
type ResultFileCounts = statuspage.ResultFileCounts

// statusProbeTimeout bounds each daemon probe of `taskctl status`.
const statusProbeTimeout = 2 * time.Second

func (t *tool) statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the project's status: daemons' health, queues, results in progress, recent throughput",
		Description: "Reads the database and asks every daemon of the configuration file's daemons: section\n" +
			"for /healthz and /metrics. The same report is served as a web page by \"taskctl status serve\".",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the status page's JSON instead of a text report"}},
		Action: func(c *cli.Context) error {
			targets, err := statusTargets(c)
			if err != nil {
				return err
			}
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				s, err := statuspage.Collect(ctx, st, targets, client, statusProbeTimeout, t.now())
				if err != nil {
					return err
				}
				if c.Bool("json") {
					enc := json.NewEncoder(t.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(s)
				}
				return statuspage.WriteText(t.stdout, s)
			})
		},
		Subcommands: []*cli.Command{t.statusServeCommand()},
	}
}

func (t *tool) statusServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the status page over HTTP (\"/\" HTML, \"/status.json\") until interrupted",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:9100", Usage: "address to serve on (port 0: any free port, printed)"},
			&cli.DurationFlag{Name: "refresh", Value: time.Minute, Usage: "how often the page reloads itself (0: never)"},
			&cli.DurationFlag{Name: "max-age", Value: 30 * time.Second, Usage: "how long one reading of the database is served again"},
			&cli.StringFlag{Name: "title", Value: "Project status", Usage: "the page's heading"},
		},
		Action: func(c *cli.Context) error {
			targets, err := statusTargets(c)
			if err != nil {
				return err
			}
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				refresh := c.Duration("refresh")
				if refresh == 0 {
					refresh = -1 // Options: negative is none
				}
				h := statuspage.New(st, targets, statuspage.Options{
					Now: t.now, Refresh: refresh, MaxAge: c.Duration("max-age"), Title: c.String("title"),
					Logger: slog.New(slog.NewTextHandler(t.stderr, nil)),
				})
				return t.serve(ctx, c.String("listen"), h)
			})
		},
	}
}

// serve runs an HTTP server for h on addr until ctx ends, then lets
// requests in flight finish for up to 10 s.
func (t *tool) serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	// Printed so a caller that asked for port 0 learns the port.
	t.printf("serving the status page on http://%s/\n", ln.Addr())
	return httpserve.Serve(ctx, httpserve.New(h, httpserve.Options{}), ln)
}

// statusTargets lists the daemons of the configuration file (--config),
// none without one.
func statusTargets(c *cli.Context) ([]statuspage.Target, error) {
	path := c.String(config.FlagConfig)
	if path == "" {
		return nil, nil
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	targets, err := statuspage.Targets(body)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return targets, nil
}
