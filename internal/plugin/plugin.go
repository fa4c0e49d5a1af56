// Package plugin turns what the internal daemons hold into the public
// plug-in API's types (package job at the module root): a job row into a
// job.Job, an instance row and its files into a job.Instance, a project's
// job.Flags into command-line flags and the daemon's environment into a
// job.Env. The public packages validator, assimilator and workgenerator use
// it to adapt a project's code to the daemons in internal/, so the
// conversion is written once.
package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// Flags returns the command-line flags of a project's own flags: string
// flags, each also read from TASKSERVER_<NAME> and the configuration file
// like every daemon flag.
func Flags(own []job.Flag) []cli.Flag {
	out := make([]cli.Flag, len(own))
	for i, f := range own {
		out[i] = &cli.StringFlag{Name: f.Name, Value: f.Value, Usage: f.Usage, EnvVars: []string{config.EnvName(f.Name)}}
	}
	return out
}

// Env returns the job.Env of a daemon of app with the project's flags own,
// read from c.
func Env(c *cli.Context, env daemon.Env, app string, own []job.Flag) job.Env {
	values := make(map[string]string, len(own))
	for _, f := range own {
		values[f.Name] = c.String(f.Name)
	}
	return job.Env{Log: env.Log, App: app, ProjectDir: env.Common.ProjectDir, DownloadDir: env.Common.DownloadDir,
		UploadDir: env.Common.UploadDir, Flags: values}
}

// Job returns the job.Job of wu, a job of app.
func Job(wu row.Workunit, app string) job.Job {
	j := job.Job{ID: wu.ID, Name: wu.Name, App: app, Batch: wu.Batch}
	if wu.ErrorMask != 0 {
		j.Errors = strings.Split(wu.ErrorMask.String(), "|")
	}
	return j
}

// Instance returns the job.Instance of r with outputs outs, as the
// validator hands them to its checker.
func Instance(r row.Result, outs []job.Output) job.Instance {
	in := instance(r)
	in.Outputs = outs
	return in
}

// Canonical returns the job.Instance of r, its output files located in
// uploadDir laid out with fan-out fan, each under its logical name. Each
// must be there and finished (see package outputfile): a handler given a
// partial set, or a file an upload could still change, would hand over a
// wrong result, so the job waits for a retry instead. The one exception is
// an output the template marks optional: the application may not have
// written it, so where there is no finished upload of it it is left out of
// Outputs.
func Canonical(r row.Result, uploadDir string, fan int) (job.Instance, error) {
	files, err := jobxml.ParseResult(r.XMLDocIn)
	if err != nil {
		return job.Instance{}, fmt.Errorf("canonical result %d: %w", r.ID, err)
	}
	in := instance(r)
	in.Outputs = make([]job.Output, 0, len(files))
	for _, f := range files {
		path, err := fanout.Path(uploadDir, f.Name, fan)
		if err != nil {
			return job.Instance{}, fmt.Errorf("canonical result %d: %w", r.ID, err)
		}
		fi, err := os.Stat(path)
		if f.Optional && (errors.Is(err, fs.ErrNotExist) || err == nil && !outputfile.Finished(fi.Mode())) {
			// Not written: the scheduler leaves a closed empty file in its
			// place when it records the report.
			continue
		}
		if err != nil {
			return job.Instance{}, fmt.Errorf("canonical result %d output %s: %w", r.ID, f.OpenName, err)
		}
		if !outputfile.Finished(fi.Mode()) {
			return job.Instance{}, fmt.Errorf("canonical result %d: %s is not a finished upload (mode %v)", r.ID, path, fi.Mode())
		}
		in.Outputs = append(in.Outputs, job.Output{Name: f.OpenName, Path: path})
	}
	return in, nil
}

// instance returns the job.Instance of r without its outputs.
func instance(r row.Result) job.Instance {
	return job.Instance{ID: r.ID, Name: r.Name, JobID: r.WorkunitID, HostID: r.HostID, UserID: r.UserID,
		AppVersionNum: r.AppVersionNum, CPUTime: r.CPUTime, ElapsedTime: r.ElapsedTime, ExitStatus: r.ExitStatus,
		Stderr: r.StderrOut}
}
