package scalebench

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Proportions of a real project (issue 22): 10^7 instances ≈ 4·10^6 jobs,
// 10^6 hosts, 3·10^5 users.
const (
	hostsPerResult = 0.1
	usersPerResult = 0.03
)

// authPrefix starts every filled user's authenticator: user i's is
// authPrefix<i>.
const authPrefix = "scaleauth"

// outputData is every instance's output: the same bytes for all, so the
// bitwise validator finds a job's two instances equal.
var outputData = []byte("scale benchmark output\n")

// fanoutDirs is the upload and download directories' fan-out (the default).
const fanoutDirs = 1024

// project is one size's project: directory, config, apps and work sets.
type project struct {
	dir, dsn, configPath, shmPath string
	apps                          [3]int64
	versions                      [12]int64
	hosts, users                  int64
	// The work sets, each setJobs jobs: due for transition, to validate,
	// to assimilate, with files to delete.
	setJobs                                    int64
	dueFirst, validFirst, assimFirst, delFirst int64
	// purgeBefore is the cutoff db_purge is run with: the finished jobs
	// older than it are its work set.
	purgeBefore int64
}

// setup makes the project directory, applies the schema, seeds the apps
// and writes the config every program reads.
func setup(ctx context.Context, st *store.Store, dir, dsn string) (*project, error) {
	if _, err := st.SchemaApply(ctx, time.Now()); err != nil {
		return nil, err
	}
	for _, d := range []string{"download", "upload", "results", "archives", "logs", "keys"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	shm, err := config.DefaultShmPath(dir)
	if err != nil {
		return nil, err
	}
	p := &project{dir: dir, dsn: dsn, configPath: filepath.Join(dir, "project.yaml"), shmPath: shm}
	now := time.Now().Unix()
	pid, err := st.PlatformInsert(ctx, row.Platform{CreateTime: now, Name: projectrun.DemoPlatform, UserFriendlyName: "Linux on x86-64"})
	if err != nil {
		return nil, err
	}
	// Each app: [NVIDIA, AMD, multi-threaded, CPU], the order
	// store.ScaleJobs.Versions wants.
	classes := []string{"cuda", "opencl_amd", "mt", ""}
	for a := range p.apps {
		id, err := st.AppInsert(ctx, row.App{CreateTime: now, Name: fmt.Sprintf("scale%d", a),
			UserFriendlyName: fmt.Sprintf("Scale app %d", a), Weight: 1})
		if err != nil {
			return nil, err
		}
		p.apps[a] = id
		for i, pc := range classes {
			vid, err := st.AppVersionInsert(ctx, row.AppVersion{CreateTime: now, AppID: id,
				VersionNum: projectrun.DemoVersionNum, PlatformID: pid, PlanClass: pc})
			if err != nil {
				return nil, err
			}
			p.versions[a*4+i] = vid
		}
	}
	if err := projectrun.WritePlanClassSpec(dir); err != nil {
		return nil, err
	}
	k, err := keys.Generate()
	if err != nil {
		return nil, err
	}
	if err := keys.WritePrivateFile(filepath.Join(dir, "keys", "upload_private"), k); err != nil {
		return nil, err
	}
	if err := keys.WritePublicFile(filepath.Join(dir, "keys", "upload_public"), &k.PublicKey); err != nil {
		return nil, err
	}
	ek, err := keys.GenerateEd25519()
	if err != nil {
		return nil, err
	}
	if err := keys.WriteEd25519PrivateFile(filepath.Join(dir, "keys", keys.Ed25519PrivateFile), ek); err != nil {
		return nil, err
	}
	if err := p.writeConfig(dsn); err != nil {
		return nil, err
	}
	return p, nil
}

// writeConfig writes the config every program reads, with the database
// at dsn: a sweep's servers each listen on a port of their own.
func (p *project) writeConfig(dsn string) error {
	p.dsn = dsn
	conf := fmt.Sprintf(`# Scale benchmark project configuration, shared by every program (keys are flag names).
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: info
# The load generator's hosts ask again at once, far past a real host's
# day: a quota that never binds keeps its check on the dispatch path.
daily-result-quota: 100000000
`, dsn, p.dir, p.shmPath)
	return os.WriteFile(p.configPath, []byte(conf), 0o600)
}

// docs returns the job and instance documents with "@@" for the names:
// one input of the job's own, one output.
func docs() (wu, res, out string, err error) {
	sum := md5.Sum(outputData)
	wu, err = jobxml.FormatWorkunit(jobxml.Workunit{Inputs: []jobxml.InputFile{{Name: "@@_in", OpenName: "in",
		Nbytes: 4096, MD5: "0123456789abcdef0123456789abcdef"}}})
	if err != nil {
		return "", "", "", err
	}
	res, err = jobxml.FormatResult([]jobxml.OutputFile{{Name: jobxml.OutputName("@@", 0), OpenName: "out", MaxNbytes: 65536}})
	if err != nil {
		return "", "", "", err
	}
	out = fmt.Sprintf("<file_info><name>%s</name><nbytes>%d</nbytes><max_nbytes>65536</max_nbytes><md5_cksum>%s</md5_cksum></file_info>",
		jobxml.OutputName("@@", 0), len(outputData), hex.EncodeToString(sum[:]))
	return wu, res, out, nil
}

// fillStats is what the fill made and how long it took.
type fillStats struct {
	Jobs, Results, Hosts, Users int64
	Seconds                     float64
}

// fill loads a project of about resultRows instances: a backlog of unsent
// work (15% of the jobs, two instances each), work in progress (60%, two
// sent instances each), a month of finished jobs waiting for purge (25%,
// three instances each, one an error), and the daemons' work sets.
// fillFoldLimit is the count rows folded per transaction after a fill:
// nothing else writes then, so larger than db_purge's.
const fillFoldLimit = 100_000

func (p *project) fill(ctx context.Context, st *store.Store, resultRows int64) (fillStats, error) {
	start := time.Now()
	now := start.Unix()
	wuDoc, resDoc, outDoc, err := docs()
	if err != nil {
		return fillStats{}, err
	}
	p.users = max(int64(float64(resultRows)*usersPerResult), 10)
	p.hosts = max(int64(float64(resultRows)*hostsPerResult), 20)
	if err := st.ScaleFillUsers(ctx, store.ScaleUsers{N: p.users, AuthPrefix: authPrefix, Now: now}); err != nil {
		return fillStats{}, err
	}
	if err := st.ScaleFillHosts(ctx, store.ScaleHosts{N: p.hosts, Users: p.users, Now: now}); err != nil {
		return fillStats{}, err
	}
	// 2.25 instances per job on average over the three big groups.
	jobs := max(resultRows*100/225, 100)
	backlog, inProgress := jobs*15/100, jobs*60/100
	finished := jobs - backlog - inProgress
	p.setJobs = min(max(resultRows/200, 200), 5000)
	const day = 86400
	base := store.ScaleJobs{AppIDs: p.apps, Versions: p.versions, WUDoc: wuDoc, ResultDoc: resDoc, ResultOut: outDoc,
		Hosts: p.hosts, Users: p.users, Now: now, ModTime: now, ModSpread: 1}
	nextJob, nextRes := int64(1), int64(1)
	var nres int64
	add := func(name string, n int64, results int, set func(g *store.ScaleJobs)) (int64, error) {
		g := base
		g.FirstJobID, g.FirstResultID, g.N, g.Results, g.NamePrefix = nextJob, nextRes, n, results, name
		set(&g)
		if err := st.ScaleFillJobs(ctx, g); err != nil {
			return 0, err
		}
		first := nextJob
		nextJob += n
		nextRes += n * int64(results)
		nres += n * int64(results)
		return first, nil
	}
	groups := []struct {
		name    string
		n       int64
		results int
		first   *int64
		set     func(g *store.ScaleJobs)
	}{
		{"fin_", finished, 3, nil, func(g *store.ScaleJobs) {
			// Finished over the last month; files deleted, waiting for
			// purge. Each job's third instance is counted in the second's
			// place by the validator: all three are over.
			g.Canonical, g.TransitionTime = true, now+365*day
			g.FileDeleteState, g.AssimilateState = state.FileDeleteDone, state.AssimilateDone
			g.ModTime, g.ModSpread = now-day, 30*day
			g.ServerState, g.Outcome, g.ValidateState, g.ResultFileDel = state.ServerOver, state.OutcomeSuccess, state.ValidateValid, state.FileDeleteDone
			g.Sent, g.Reported, g.SentAgo, g.DeadlineAfter = true, true, 40*day, 14*day
		}},
		{"prog_", inProgress, 2, nil, func(g *store.ScaleJobs) {
			g.TransitionTime, g.TransitionSpred = now+day, 14*day
			g.ServerState, g.Sent, g.SentAgo, g.DeadlineAfter = state.ServerInProgress, true, 7*day, 14*day
		}},
		{"unsent_", backlog, 2, nil, func(g *store.ScaleJobs) {
			g.TransitionTime, g.TransitionSpred = now+7*day, 7*day
			g.ServerState = state.ServerUnsent
		}},
		{"due_", p.setJobs, 0, &p.dueFirst, func(g *store.ScaleJobs) {
			g.TransitionTime = now - 60 // new jobs, as the work generator leaves them
		}},
		{"valid_", p.setJobs, 2, &p.validFirst, func(g *store.ScaleJobs) {
			g.NeedValidate, g.TransitionTime = true, now+7*day
			g.ServerState, g.Outcome, g.Sent, g.Reported, g.SentAgo, g.DeadlineAfter = state.ServerOver, state.OutcomeSuccess, true, true, day, 14*day
		}},
		{"assim_", p.setJobs, 2, &p.assimFirst, func(g *store.ScaleJobs) {
			g.Canonical, g.TransitionTime, g.AssimilateState = true, now+7*day, state.AssimilateReady
			g.ServerState, g.Outcome, g.ValidateState, g.Sent, g.Reported, g.SentAgo, g.DeadlineAfter = state.ServerOver, state.OutcomeSuccess, state.ValidateValid, true, true, day, 14*day
		}},
		{"del_", p.setJobs, 2, &p.delFirst, func(g *store.ScaleJobs) {
			g.Canonical, g.TransitionTime = true, now+365*day
			g.FileDeleteState, g.AssimilateState = state.FileDeleteReady, state.AssimilateDone
			g.ServerState, g.Outcome, g.ValidateState, g.ResultFileDel = state.ServerOver, state.OutcomeSuccess, state.ValidateValid, state.FileDeleteReady
			g.Sent, g.Reported, g.SentAgo, g.DeadlineAfter = true, true, day, 14*day
		}},
	}
	for _, g := range groups {
		first, err := add(g.name, g.n, g.results, g.set)
		if err != nil {
			return fillStats{}, err
		}
		if g.first != nil {
			*g.first = first
		}
	}
	// The triggers wrote a count row for every row loaded; db_purge would
	// have folded them as the month went by.
	for {
		n, err := st.CountsFold(ctx, fillFoldLimit)
		if err != nil {
			return fillStats{}, err
		}
		if n < fillFoldLimit {
			break
		}
	}
	// db_purge's set: the oldest tenth of the finished month.
	p.purgeBefore = now - day - 27*day
	return fillStats{Jobs: nextJob - 1, Results: nres, Hosts: p.hosts, Users: p.users,
		Seconds: round3(time.Since(start).Seconds())}, nil
}

// stageOutputs writes, as finished uploads, the outputs the validator and
// the assimilator read: both instances of each job to validate, the
// canonical instance of each job to assimilate.
func (p *project) stageOutputs() error {
	dir := filepath.Join(p.dir, "upload")
	write := func(name string) error {
		path, err := fanout.Path(dir, name, fanoutDirs)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return writeFinished(path)
	}
	for k := range p.setJobs {
		for _, n := range []string{
			fmt.Sprintf("valid_%d_0", p.validFirst+k), fmt.Sprintf("valid_%d_1", p.validFirst+k),
			fmt.Sprintf("assim_%d_0", p.assimFirst+k),
		} {
			if err := write(jobxml.OutputName(n, 0)); err != nil {
				return err
			}
		}
	}
	return nil
}
