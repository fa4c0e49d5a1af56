// Command scheduler is the project's public HTTP server: the master page,
// the scheduler RPC, and the data server (downloads and uploads), with
// /metrics and /healthz on a separate, by default loopback, address. It
// hands out work from the shared-memory cache the
// feeder on the same host keeps full.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/connlimit"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dataserver"
	"github.com/taskserver/taskserver/internal/httpserve"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/scheduler/limits"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

const program = "scheduler"

const (
	flagAddr                = "addr"
	flagURLBase             = "url-base"
	flagProjectName         = "project-name"
	flagUploadKey           = "upload-key"
	flagUploadCertKey       = "upload-cert-key"
	flagUploadCertAccept    = "upload-cert-accept"
	flagUploadGrace         = "upload-grace"
	flagCodeSignKey         = "code-sign-key"
	flagRequestDelay        = "request-delay"
	flagMaxResultsPerRPC    = "max-results-per-rpc"
	flagCommitLanes         = "commit-lanes"
	flagMaxInProgressPerCPU = "max-in-progress-per-cpu"
	flagMaxInProgressPerGPU = "max-in-progress-per-gpu"
	flagAppMaxInProgress    = "app-max-in-progress"
	flagMaxBodyBytes        = "max-body-bytes"
	flagMaxConns            = "max-db-conns"
	flagNextRPCDelay        = "next-rpc-delay"
	flagReportImmediately   = "report-immediately"
	flagTrickleDown         = "trickle-down"
	flagAccountCreation     = "account-creation"
	flagARTrustValid        = "ar-trust-valid"
	flagARSpotCheck         = "ar-spot-check"
	flagQuarantineStreak    = "quarantine-streak"
	flagDailyResultQuota    = "daily-result-quota"
	flagGPUQuotaMultiplier  = "gpu-quota-multiplier"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:   program,
		Usage:  "serve the master page, the scheduler RPC, downloads and uploads",
		Flags:  flags(),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error { return serve(ctx, c) },
	}
	return app.RunContext(ctx, args)
}

func flags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	fs := append(config.CommonFlags(defaultAdminListenAddr), config.ShmFlag(), config.PlanClassSpecFlag())
	fs = append(fs,
		&cli.StringFlag{Name: flagAddr, Value: "127.0.0.1:8080", EnvVars: env(flagAddr),
			Usage: "address of the public HTTP server (master page, scheduler, downloads, uploads; /metrics and /healthz are on --listen; port 0: any free port, see --addr-file)"},
		&cli.StringFlag{Name: flagURLBase, Value: "http://127.0.0.1:8080", EnvVars: env(flagURLBase),
			Usage: "public URL of this server as volunteers reach it (the attach URL is this plus \"/\"; the host must contain a dot; empty: http:// and the address --addr bound, for a server started on port 0)"},
		&cli.StringFlag{Name: flagProjectName, Value: "Task server project", EnvVars: env(flagProjectName),
			Usage: "project name shown by clients and on the master page"},
		&cli.StringFlag{Name: flagUploadKey, Value: "keys/upload_private", EnvVars: env(flagUploadKey),
			Usage: "upload private key (BOINC RSA format) that signs upload certificates when there is no --" + flagUploadCertKey + "; uploads signed with it are accepted as long as it is there (may be missing when the default Ed25519 key exists)"},
		&cli.StringFlag{Name: flagUploadCertKey, Value: "keys/" + keys.Ed25519PrivateFile, EnvVars: env(flagUploadCertKey),
			Usage: "Ed25519 private key (PEM, taskctl keys generate) that signs upload certificates instead of --" + flagUploadKey + ", at a small fraction of the CPU; used when the default file exists (\"\" turns it off)"},
		&cli.StringSliceFlag{Name: flagUploadCertAccept, EnvVars: env(flagUploadCertAccept),
			Usage: "Ed25519 public key file (PEM) whose upload certificates are still accepted, e.g. the key before a rotation until its tasks' deadlines pass (repeatable)"},
		&cli.DurationFlag{Name: flagUploadGrace, Value: scheduler.DefaultUploadGrace, EnvVars: env(flagUploadGrace),
			Usage: "how long after a task's report deadline its upload certificates still authorise an upload (a late result is still a result); after that they authorise nothing, even once the file was deleted; 0 is the default, negative is none"},
		&cli.StringFlag{Name: flagCodeSignKey, Value: "keys/code_sign_public", EnvVars: env(flagCodeSignKey),
			Usage: "code-signing public key (BOINC format) sent to clients that have none; if the default file is missing none is sent"},
		&cli.DurationFlag{Name: flagRequestDelay, Value: 5 * time.Second, EnvVars: env(flagRequestDelay),
			Usage: "least time a client waits before its next scheduler request"},
		&cli.IntFlag{Name: flagMaxResultsPerRPC, Value: 10, EnvVars: env(flagMaxResultsPerRPC),
			Usage: "most new results sent in one reply"},
		&cli.IntFlag{Name: flagMaxInProgressPerCPU, Value: 4, EnvVars: env(flagMaxInProgressPerCPU),
			Usage: "most CPU tasks a host may hold in progress, per CPU (BOINC's max_wus_in_progress; a volunteer's <max_cpus> lowers the CPUs counted)"},
		&cli.IntFlag{Name: flagMaxInProgressPerGPU, Value: 0, EnvVars: env(flagMaxInProgressPerGPU),
			Usage: "most tasks a host may hold in progress for each GPU type, per GPU of that type (BOINC's max_wus_in_progress_gpu; 0: no limit)"},
		&cli.StringSliceFlag{Name: flagAppMaxInProgress, EnvVars: env(flagAppMaxInProgress),
			Usage: "APP=N: most tasks of app APP a host may hold in progress, whatever their resource (repeatable, or APP=N,APP2=M; BOINC's <max_jobs_in_progress><app>)"},
		&cli.Int64Flag{Name: flagMaxBodyBytes, Value: protocol.DefaultMaxBodyBytes, EnvVars: env(flagMaxBodyBytes),
			Usage: "largest scheduler request body read, in bytes (the default fits the largest stderr a client sends for each of 2000 reported tasks; memory does not grow with it); a larger one is answered with a message and a 6-hour request_delay"},
		&cli.IntFlag{Name: flagCommitLanes, Value: 1, EnvVars: env(flagCommitLanes),
			Usage: "most group commits of concurrent requests' writes running at once (the shared reads overlap them already; more lanes make smaller batches)"},
		&cli.IntFlag{Name: flagMaxConns, Value: 16, EnvVars: env(flagMaxConns),
			Usage: "most database connections this server opens"},
		&cli.DurationFlag{Name: flagNextRPCDelay, Value: 0, EnvVars: env(flagNextRPCDelay),
			Usage: "make clients contact the scheduler again after this long even when they need nothing (0: never asked)"},
		&cli.BoolFlag{Name: flagReportImmediately, Value: true, EnvVars: env(flagReportImmediately),
			Usage: "ask clients to report each result as soon as its output is uploaded (--report-immediately=false: clients batch reports)"},
		&cli.BoolFlag{Name: flagTrickleDown, Value: true, EnvVars: env(flagTrickleDown),
			Usage: "put the trickle-down messages queued for a host (taskctl trickle send, trickle handlers) in its replies; costs one indexed read per request (--trickle-down=false: none are sent)"},
		&cli.BoolFlag{Name: flagAccountCreation, Value: false, EnvVars: env(flagAccountCreation),
			Usage: "let volunteers create accounts with create_account.php (the Manager's wizard, boinccmd --create_account)"},
		&cli.IntFlag{Name: flagARTrustValid, Value: 10, EnvVars: env(flagARTrustValid),
			Usage: "valid results in a row (with no error since) that make a host trusted: adaptive replication then sends it jobs alone, and it may get tail copies if it also reports quickly"},
		&cli.Float64Flag{Name: flagARSpotCheck, Value: 0.1, EnvVars: env(flagARSpotCheck),
			Usage: "least probability (0..1) that an adaptive replication job sent to a trusted host is replicated anyway"},
		&cli.IntFlag{Name: flagQuarantineStreak, Value: 5, EnvVars: env(flagQuarantineStreak),
			Usage: "errors or invalid results in a row that quarantine a host: one task at a time, never trusted (0: no quarantine)"},
		&cli.IntFlag{Name: flagDailyResultQuota, Value: 500, EnvVars: env(flagDailyResultQuota),
			Usage: "jobs of one app version a host may get a day, per CPU (per GPU for a GPU version), as BOINC's daily_result_quota: each host's quota shrinks by one per error, down to 1, and doubles back on valid results (0: no daily quota); give the validators the same value"},
		&cli.IntFlag{Name: flagGPUQuotaMultiplier, Value: 1, EnvVars: env(flagGPUQuotaMultiplier),
			Usage: "multiplies the daily quota of a GPU version per GPU, as BOINC's gpu_multiplier"},
	)
	fs = append(fs, rateLimitFlags()...)
	fs = append(fs, netFlags()...)
	fs = append(fs, accountLimitFlags()...)
	return append(fs, submitAPIFlags()...)
}

func serve(ctx context.Context, c *cli.Context) error {
	cfg, err := config.CommonFrom(c)
	errs := []error{err}
	if n := c.Int(flagMaxConns); n < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1", flagMaxConns, n))
	}
	if c.String(flagAddr) == "" {
		errs = append(errs, fmt.Errorf("--%s is empty", flagAddr))
	}
	rateLimit, err := rateLimitFrom(c)
	errs = append(errs, err)
	appMax, err := limits.ParseApps(c.StringSlice(flagAppMaxInProgress))
	if err != nil {
		errs = append(errs, fmt.Errorf("--%s %w", flagAppMaxInProgress, err))
	}
	schedCfg := schedulerConfig(c, cfg, rateLimit)
	schedCfg.PlanClasses, err = loadPlanClasses(c, cfg)
	errs = append(errs, err)
	schedCfg.AppMaxInProgress = appMax
	// An empty --url-base is the address --addr binds, known only once it
	// is bound; until then --addr stands in for it.
	check := schedCfg
	if check.URLBase == "" {
		check.URLBase = "http://" + c.String(flagAddr)
	}
	errs = append(errs, check.Validate())
	nofile, fileLimitErr := connlimit.RaiseFileLimit()
	netCfg, err := netSettingsFrom(c, nofile)
	errs = append(errs, err)
	accountLimit, err := accountLimitFrom(c, rateLimit)
	errs = append(errs, err)
	if err := daemon.JoinDistinct(errs...); err != nil {
		return err
	}
	log := daemon.NewLogger(program, cfg.LogLevel)
	reg := daemon.NewRegistry(program)
	if fileLimitErr != nil {
		log.Warn("open-file limit not raised", "error", fileLimitErr)
	}
	netCfg.server.Metrics = httpserve.NewMetrics(reg, program)

	uploadKeys, err := readUploadKeys(c, cfg)
	if err != nil {
		return err
	}
	codeSignKey, err := readCodeSignKey(c, cfg)
	if err != nil {
		return err
	}
	if codeSignKey == "" {
		log.Warn("no code-signing key: clients will not accept signed app files (anonymous-platform clients are unaffected)",
			"path", cfg.Path(c.String(flagCodeSignKey)))
	}
	var rotationSig string
	if codeSignKey != "" {
		if rotationSig, err = readRotationSignature(cfg.Path(c.String(flagCodeSignKey))); err != nil {
			return err
		}
	}

	// Every request runs the same user, host and in-progress read: prepared
	// once per connection, the server does not parse it each time.
	dbm := daemon.NewDBMetrics(reg, program)
	opts := dbm.StoreOptions(cfg)
	opts.MaxOpenConns, opts.Prepared = c.Int(flagMaxConns), true
	st, err := store.Open(ctx, cfg.DBDSN, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	// The submission API's reads must see what was just written through
	// another node (a batch submitted to another scheduler): its own small
	// pool waits for the cluster on each read (SyncReads), which the
	// scheduler's own reads, thousands a second, do not pay.
	apiStore := st
	if c.Bool(flagSubmitAPI) {
		opts := dbm.StoreOptions(cfg)
		opts.MaxOpenConns, opts.SyncReads = submitAPIConns, true
		if apiStore, err = store.Open(ctx, cfg.DBDSN, opts); err != nil {
			return err
		}
		defer apiStore.Close()
	}
	if err := st.SchemaCheck(ctx); err != nil {
		return err
	}

	shmPath, err := cfg.ShmPath(c.String(config.FlagShmPath))
	if err != nil {
		return err
	}
	cache := scheduler.NewCacheFile(shmPath)
	defer cache.Close()
	if _, err := cache.Current(); errors.Is(err, shmcache.ErrLayout) {
		return fmt.Errorf("refusing to start: %w (upgrade the scheduler or the feeder so they agree)", err)
	} else if err != nil {
		log.Warn("shared-memory cache not available yet: no new work is sent until the feeder creates it", "error", err)
	}

	// Bound before the URL base is known: an empty --url-base is this
	// listener's own address, which with port 0 only the kernel knows.
	addrs := httpserve.NewAddrFile(cfg.AddrFile)
	ln, err := httpserve.Listen(c.String(flagAddr), flagAddr, addrs)
	if err != nil {
		return err
	}
	defer ln.Close()
	if schedCfg.URLBase == "" {
		schedCfg.URLBase = "http://" + ln.Addr().String()
	}
	urlBase := strings.TrimRight(schedCfg.URLBase, "/")
	svc, err := scheduler.New(schedCfg, scheduler.Deps{
		Store:                st,
		Cache:                cache,
		UploadKey:            uploadKeys.rsa,
		UploadCertKey:        uploadKeys.ed,
		CodeSignKey:          codeSignKey,
		CodeSignKeySignature: rotationSig,
		Log:                  log,
		Metrics:              scheduler.NewMetrics(reg),
	})
	if err != nil {
		return err
	}
	accounts, err := scheduler.NewAccounts(scheduler.AccountOptions{
		Store:           st,
		Cache:           cache,
		URLBase:         urlBase,
		ProjectName:     c.String(flagProjectName),
		AccountCreation: c.Bool(flagAccountCreation),
		PasswdCost:      c.Int(flagPasswdCost),
		Limit:           accountLimit,
		Logger:          log,
		Registerer:      reg,
	})
	if err != nil {
		return err
	}
	ds, err := dataserver.New(dataserver.Options{
		DownloadDir:    cfg.DownloadDir,
		UploadDir:      cfg.UploadDir,
		Fanout:         cfg.Fanout,
		UploadKey:      uploadKeys.rsaPublic(),
		UploadCertKeys: uploadKeys.accept,
		Logger:         log,
		Registerer:     reg,
	})
	if err != nil {
		return err
	}
	defer ds.Close()

	health := &daemon.Health{}
	mux := newMux(routes{scheduler: svc, dataServer: ds, accounts: accounts, master: scheduler.MasterPage(c.String(flagProjectName), urlBase+"/scheduler")})
	if err := mountSubmitAPI(c, mux, apiStore, reg, log); err != nil {
		return err
	}
	public := httpserve.New(netCfg.proxies.Handler(mux), netCfg.server)
	log.Info("serving", "addr", ln.Addr().String(), "url_base", urlBase, "shm_path", shmPath, "upload_certificates", uploadKeys.signer(),
		"plan_classes", len(schedCfg.PlanClasses.Names()),
		"max_connections", netCfg.limits.Max, "open_file_limit", nofile)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return httpserve.Serve(gctx, public, connlimit.Listen(ln, netCfg.limits, connlimit.NewMetrics(reg, program)))
	})
	g.Go(func() error { return daemon.Serve(gctx, log, cfg.Listen, addrs, daemon.AdminMux(reg, health)) })
	g.Go(func() error { watchDB(gctx, st, health); return nil })
	err = g.Wait()
	// The daily quota's counts of the last second: with the server stopped,
	// no request can add to them.
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if ferr := svc.Flush(fctx); ferr != nil {
		log.Warn("stopping", "error", ferr)
	}
	cancel()
	if err == nil && ctx.Err() != nil {
		log.Info("stopped")
	}
	return err
}

// schedulerConfig reads the scheduler service's flags; an empty URLBase is
// the address --addr binds.
func schedulerConfig(c *cli.Context, common config.Common, rateLimit scheduler.RateLimit) scheduler.Config {
	return scheduler.Config{
		URLBase:             strings.TrimRight(c.String(flagURLBase), "/"),
		Fanout:              common.Fanout,
		UploadDir:           common.UploadDir,
		UploadGrace:         scheduler.UploadGraceFromFlag(c.Duration(flagUploadGrace)),
		NextRPCDelay:        c.Duration(flagNextRPCDelay),
		ReportImmediately:   c.Bool(flagReportImmediately),
		TrickleDown:         c.Bool(flagTrickleDown),
		ProjectName:         c.String(flagProjectName),
		RequestDelay:        c.Duration(flagRequestDelay),
		MaxResultsPerRPC:    c.Int(flagMaxResultsPerRPC),
		MaxInProgressPerCPU: c.Int(flagMaxInProgressPerCPU),
		MaxInProgressPerGPU: c.Int(flagMaxInProgressPerGPU),
		MaxBodyBytes:        c.Int64(flagMaxBodyBytes),
		CommitLanes:         c.Int(flagCommitLanes),
		ARTrustValid:        c.Int(flagARTrustValid),
		ARSpotCheck:         c.Float64(flagARSpotCheck),
		QuarantineStreak:    c.Int(flagQuarantineStreak),
		DailyResultQuota:    c.Int(flagDailyResultQuota),
		GPUQuotaMultiplier:  c.Int(flagGPUQuotaMultiplier),
		RateLimit:           rateLimit,
	}
}

// loadPlanClasses reads --plan-class-spec: nil when the default file does
// not exist; an error, naming the flag and the file, when one named
// explicitly is missing or any of it does not parse (a scheduler that
// quietly dropped a class would send its versions to no one).
func loadPlanClasses(c *cli.Context, cfg config.Common) (*planclass.Specs, error) {
	s, err := planclass.Load(cfg.Path(c.String(config.FlagPlanClassSpec)), c.IsSet(config.FlagPlanClassSpec))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", config.FlagPlanClassSpec, err)
	}
	return s, nil
}

// readCodeSignKey returns the code-signing public key text to send, or ""
// when the default file does not exist. A key named explicitly must exist.
func readCodeSignKey(c *cli.Context, cfg config.Common) (string, error) {
	path := cfg.Path(c.String(flagCodeSignKey))
	if path == "" {
		return "", nil
	}
	k, err := keys.ReadPublicFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !c.IsSet(flagCodeSignKey) {
			return "", nil
		}
		return "", fmt.Errorf("--%s: %w", flagCodeSignKey, err)
	}
	return keys.FormatPublic(k), nil
}

// watchDB keeps /healthz honest: unhealthy while the database does not
// answer, since every scheduler request then gets 503.
func watchDB(ctx context.Context, st *store.Store, h *daemon.Health) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := st.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.Fail(fmt.Errorf("database: %w", err))
		} else {
			h.Fail(nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
