// Package job holds what a project's own daemons (its validator's checker,
// its assimilator's handler, its work generator's inputs) are handed: a job,
// an instance with its output files, and the environment the daemon runs in.
// These are the plug-in API's own types, apart from the server's database
// rows, so a project's code keeps compiling as the server's schema grows.
//
// The daemons themselves are in the packages validator, assimilator and
// workgenerator beside this one.
package job

import (
	"log/slog"
	"path/filepath"
)

// Job is one job (BOINC's workunit) of the daemon's app.
type Job struct {
	// ID is the job's id in the database.
	ID int64
	// Name is the job's unique name.
	Name string
	// App is the name of the app the job belongs to.
	App string
	// Batch is the id of the batch the job was submitted in; 0 for none.
	Batch int64
	// Errors names, for a job that failed, why: "couldnt_send_result",
	// "too_many_error_results", "too_many_success_results",
	// "too_many_total_results", "cancelled", "no_canonical_result", or a
	// hexadecimal bit mask for a reason newer than this list. It is empty
	// for a job that succeeded.
	Errors []string
}

// Instance is one instance (BOINC's result) of a job: one host's run of it,
// as that host reported it.
type Instance struct {
	// ID is the instance's id in the database; 0 for the expected output
	// of a known-answer job, which no host computed.
	ID int64
	// Name is the instance's unique name, conventionally
	// "<job name>_<n>"; "known_answer_<id>" for a known-answer job's
	// expected output.
	Name string
	// JobID is the id of the instance's job.
	JobID int64
	// HostID and UserID are the volunteer host that ran it and its owner.
	HostID, UserID int64
	// AppVersionNum is the version of the app the host ran.
	AppVersionNum int
	// CPUTime and ElapsedTime are the seconds of CPU and of wall-clock time
	// the host reported.
	CPUTime, ElapsedTime float64
	// ExitStatus is the program's exit status as the host reported it.
	ExitStatus int
	// Stderr is what the host reported of the program's standard error.
	Stderr string
	// Outputs are the instance's output files, in the job's order.
	Outputs []Output
}

// Output is one output file of an instance, uploaded and finished: no
// upload writes to it again.
type Output struct {
	// Name is the logical name the app wrote the file under (BOINC's
	// open_name, such as "out"); empty for a known-answer job's expected
	// output, which is stored without one.
	Name string
	// Path is where the file is on the server. The file belongs to the
	// upload directory: read it, never change or remove it.
	Path string
}

// Output returns the output file of logical name name.
func (in Instance) Output(name string) (Output, bool) {
	for _, o := range in.Outputs {
		if o.Name == name {
			return o, true
		}
	}
	return Output{}, false
}

// Env is the environment a project's daemon runs in: its logger, its app,
// the project's directories and the values of the program's own flags. The
// daemon hands it to the project's constructor once its configuration is
// valid and its database open.
type Env struct {
	// Log is the daemon's logger (JSON lines on standard error, at
	// --log-level, each with the program's name).
	Log *slog.Logger
	// App is the name of the daemon's app (--app).
	App string
	// ProjectDir is the project directory (--project-dir); DownloadDir
	// holds the jobs' input files and UploadDir the instances' output
	// files, both resolved against it.
	ProjectDir, DownloadDir, UploadDir string
	// Flags holds the value of each of the program's own flags (see Flag)
	// by name.
	Flags map[string]string
}

// Path resolves p against the project directory unless it is absolute, as
// the daemons resolve their own path flags.
func (e Env) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.ProjectDir, p)
}

// Flag is an option of a project's own daemon, beside the stock daemon's.
// Like every option it is set on the command line (--name value), in the
// environment (TASKSERVER_<NAME>, upper case, '-' as '_') or in the
// project's configuration file (name: value), in that order of precedence;
// Env.Flags has its value. Its name must not be one the stock daemon takes:
// the program would stop at start with "flag --NAME is defined twice".
type Flag struct {
	// Name is the flag's name without the dashes, such as "csv-dir".
	Name string
	// Value is the default value.
	Value string
	// Usage is the flag's one-line help.
	Usage string
}
