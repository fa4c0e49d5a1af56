package main

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/submitapi"
)

// submitAPIConns bounds the submission API's own database connections:
// scientists' requests are few, and each is a handful of statements.
const submitAPIConns = 4

const (
	flagSubmitAPI             = "submit-api"
	flagResultsDir            = "results-dir"
	flagSubmitAPIMaxBodyBytes = "submit-api-max-body-bytes"
)

// submitAPIFlags are the options of the scientists' submission API.
func submitAPIFlags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	return []cli.Flag{
		&cli.BoolFlag{Name: flagSubmitAPI, Value: false, EnvVars: env(flagSubmitAPI),
			Usage: "serve the batch submission API under /api/v1/ (for users with submit permission, taskctl user create --submit-allowed, and an API key of their own, taskctl user apikey)"},
		&cli.StringFlag{Name: flagResultsDir, Value: "results", EnvVars: env(flagResultsDir),
			Usage: "results directory the assimilator writes, from which the submission API serves batch outputs"},
		&cli.Int64Flag{Name: flagSubmitAPIMaxBodyBytes, Value: submitapi.DefaultMaxBodyBytes, EnvVars: env(flagSubmitAPIMaxBodyBytes),
			Usage: "largest submission API request body, in bytes (inputs are base64 in JSON; larger: HTTP 413)"},
	}
}

// mountSubmitAPI serves the submission API under /api/v1/ on mux when
// --submit-api is set, with its metrics in reg; otherwise it does nothing.
func mountSubmitAPI(c *cli.Context, mux *http.ServeMux, st *store.Store, reg prometheus.Registerer, log *slog.Logger) error {
	if !c.Bool(flagSubmitAPI) {
		return nil
	}
	cfg, err := config.CommonFrom(c)
	if err != nil {
		return err
	}
	maxBody := c.Int64(flagSubmitAPIMaxBodyBytes)
	if maxBody < 4096 {
		return fmt.Errorf("--%s %d: want at least 4096", flagSubmitAPIMaxBodyBytes, maxBody)
	}
	if c.String(flagResultsDir) == "" {
		return fmt.Errorf("--%s is empty", flagResultsDir)
	}
	svc := batch.New(batch.Options{Store: st, DownloadDir: cfg.DownloadDir, Fanout: cfg.Fanout,
		ResultsDir: cfg.Path(c.String(flagResultsDir)), Limits: batch.Limits{MaxTotalBytes: maxBody}})
	api, err := submitapi.New(submitapi.Options{Batches: svc, Users: st, MaxBodyBytes: maxBody, Logger: log,
		Metrics: submitapi.NewMetrics(reg)})
	if err != nil {
		return err
	}
	mux.Handle(submitapi.Prefix, api)
	log.Info("serving the submission API", "path", submitapi.Prefix)
	return nil
}
