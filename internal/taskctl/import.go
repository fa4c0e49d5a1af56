package taskctl

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/boincimport/boincconfig"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/store"
)

// Flags of taskctl import boinc.
const (
	flagImportFrom       = "from"
	flagImportDryRun     = "dry-run"
	flagImportVerify     = "verify"
	flagImportChunk      = "chunk"
	flagBoincProjectDir  = "boinc-project-dir"
	flagBoincDownloadDir = "boinc-download-dir"
	flagBoincDownloadURL = "boinc-download-url"
	flagUploadGrace      = "upload-grace"
	flagProjectFile      = "project-file"
	flagForce            = "force"
)

func (t *tool) importCommand() *cli.Command {
	return &cli.Command{
		Name:  "import",
		Usage: "move an existing project over",
		Subcommands: []*cli.Command{{
			Name: "boinc",
			Usage: "import a BOINC project's database (read only: never written) into ours: platforms, apps, app versions, " +
				"teams, users, hosts, and the jobs in flight with their instances; ids kept; run again after a crash to finish",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: flagImportFrom, Required: true, Usage: "the BOINC database's DSN (go-sql-driver/mysql form); SELECT is the only privilege needed"},
				&cli.BoolFlag{Name: flagImportDryRun, Usage: "print what the import would do (rows per table, rows already here, conflicts) and write nothing"},
				&cli.BoolFlag{Name: flagImportVerify, Usage: "import nothing: compare counts and credit sums of users, hosts and teams (and the catalog's counts) between the two databases; exit 1 on a mismatch"},
				&cli.IntFlag{Name: flagImportChunk, Value: 1000, Usage: "rows read and written at a time"},
				&cli.StringFlag{Name: flagBoincProjectDir, Usage: "the BOINC project's directory (its config.xml, templates/, download/)"},
				&cli.StringFlag{Name: flagBoincDownloadDir, Usage: "the BOINC project's download directory (config.xml <download_dir>), where its app files are; default <boinc-project-dir>/download"},
				&cli.StringFlag{Name: flagBoincDownloadURL, Usage: "the BOINC project's download URL (config.xml <download_url>): job inputs under it are served from our download directory; without it they keep their URLs"},
				&cli.StringFlag{Name: flagProjectFile, Usage: "also convert the BOINC project's config.xml, config_aux.xml and plan_class_spec.xml (in --" + flagBoincProjectDir + ") into our project file, written here (mode 0600) before anything is imported; options it cannot carry over are listed with the reason"},
				&cli.BoolFlag{Name: flagForce, Usage: "let --" + flagProjectFile + " replace an existing project file and plan_class_spec.xml"},
				&cli.DurationFlag{Name: flagUploadGrace, Value: scheduler.DefaultUploadGrace, EnvVars: []string{config.EnvName(flagUploadGrace)},
					Usage: "the scheduler's --" + flagUploadGrace + " (read from the project file): tasks in flight that carry no upload certificate (a BOINC project that signed none) get upload permits in <upload-dir>/" +
						outputfile.PermitDir + ", which expire at the task's report deadline plus this; 0 is the default, negative is none"},
			},
			Before: config.LoadFileKeys(flagUploadGrace),
			Action: t.importBoinc,
		}},
	}
}

// importConns is the connections the import opens to our database: its
// tables are copied side by side.
const importConns = 8

func (t *tool) importBoinc(c *cli.Context) error {
	cfg, err := config.CommonFrom(c)
	if err != nil {
		return err
	}
	if err := t.convertBoincConfig(c, cfg); err != nil {
		return err
	}
	ctx := c.Context
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	// SyncReads: the import's checks read back what it wrote, maybe
	// through another node of a cluster.
	st, err := store.Open(octx, cfg.DBDSN, store.Options{MaxOpenConns: importConns, SyncReads: true,
		Retries: cfg.DBRetriesOption(), RetryBackoff: cfg.DBRetryBackoff})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.SchemaCheck(ctx); err != nil {
		return err
	}
	src, err := store.OpenBoinc(octx, c.String(flagImportFrom))
	if err != nil {
		return err
	}
	defer src.Close()
	if c.Bool(flagImportVerify) {
		cs, err := boincimport.Verify(ctx, src, st)
		t.printf("%s", boincimport.FormatComparisons(cs))
		return err
	}
	projectDir := c.String(flagBoincProjectDir)
	downloadDir := c.String(flagBoincDownloadDir)
	if downloadDir == "" && projectDir != "" {
		downloadDir = filepath.Join(projectDir, "download")
	}
	im, err := boincimport.New(boincimport.Config{
		DryRun:         c.Bool(flagImportDryRun),
		Chunk:          c.Int(flagImportChunk),
		OldDownloadURL: c.String(flagBoincDownloadURL),
		OldDownloadDir: downloadDir,
		OldProjectDir:  projectDir,
		DownloadDir:    cfg.DownloadDir,
		Fanout:         cfg.Fanout,
		UploadDir:      cfg.UploadDir,
		UploadGrace:    scheduler.UploadGraceFromFlag(c.Duration(flagUploadGrace)),
		Progress:       t.stderr,
		Now:            t.now,
	}, src, st)
	if err != nil {
		return err
	}
	rep, err := im.Run(ctx)
	t.printImport(rep)
	return err
}

// convertBoincConfig writes our project file from the BOINC project's
// configuration when --project-file asks for it (a dry run prints it
// instead), before the database is touched: a configuration that does not
// parse stops the move before anything is written.
func (t *tool) convertBoincConfig(c *cli.Context, cfg config.Common) error {
	out := c.String(flagProjectFile)
	if out == "" || c.Bool(flagImportVerify) {
		return nil
	}
	if c.String(flagBoincProjectDir) == "" {
		return fmt.Errorf("--%s needs --%s (the directory of the BOINC project's config.xml)", flagProjectFile, flagBoincProjectDir)
	}
	res, err := boincconfig.Convert(boincconfig.Options{OldDir: c.String(flagBoincProjectDir), ProjectDir: cfg.ProjectDir,
		Out: out, DBDSN: cfg.DBDSN, Force: c.Bool(flagForce), DryRun: c.Bool(flagImportDryRun)})
	if err != nil {
		return fmt.Errorf("--%s: %w", flagProjectFile, err)
	}
	if c.Bool(flagImportDryRun) {
		t.printf("project file %s would be:\n%s\n", out, res.File)
	} else {
		t.printf("project file %s written\n", out)
	}
	return res.Report.WriteText(t.stdout)
}

// printImport writes the import's report.
func (t *tool) printImport(rep boincimport.Report) {
	if rep.DryRun {
		t.printf("dry run: nothing was written\n")
	}
	verb := "imported"
	if rep.DryRun {
		verb = "would import"
	}
	tw := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TABLE\tBOINC ROWS\tALREADY HERE\t%s\tCONFLICTS\tSKIPPED\n", strings.ToUpper(verb))
	for _, tr := range rep.Tables {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", tr.Table, tr.Source, tr.Present, tr.Imported, tr.Conflicts, tr.Skipped)
	}
	_ = tw.Flush()
	for _, tr := range rep.Tables {
		if tr.Conflicts > 0 {
			t.printf("%s: our database holds other rows at ids %v (first %d of %d listed)\n", tr.Table, tr.ConflictIDs, len(tr.ConflictIDs), tr.Conflicts)
		}
		for _, r := range tr.Reasons {
			t.printf("skipped: %s\n", r)
		}
	}
	t.printf("finished BOINC jobs not imported (assimilated, failed, or validated and waiting for BOINC's assimilator): %d\n", rep.FinishedJobs)
	for _, f := range rep.AppFiles {
		t.printf("app file in our download directory: %s\n", f)
	}
	for _, f := range rep.MissingAppFiles {
		t.printf("app file to place in our download directory (not found in BOINC's): %s\n", f)
	}
	if rep.UploadPermits > 0 {
		t.printf("outputs of tasks in flight without an upload certificate, accepted under a permit until their deadline plus the upload grace: %d (the last expires at %s; %s can be removed after)\n",
			rep.UploadPermits, time.Unix(rep.PermitsExpire, 0).UTC().Format(time.RFC3339), outputfile.PermitDir)
	}
}
