package daemon_test

import (
	"crypto/ed25519"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dataserver"
	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/feeder"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/statsexport"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/submitapi"
	"github.com/taskserver/taskserver/internal/transitioner"
	"github.com/taskserver/taskserver/internal/trickle"
	"github.com/taskserver/taskserver/internal/validator"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// loopPrograms are the programs run by daemon.RunLoopProgram.
var loopPrograms = []string{"assimilator", "db_dump", "db_purge", "feeder", "file_deleter", "transitioner", "trickle_handler", "validator", "work_generator"}

// programRegistries builds every program's metrics, each on a fresh
// registry as its main does, and touches the database metrics once so
// their series exist.
func programRegistries(t *testing.T) map[string]*prometheus.Registry {
	t.Helper()
	st := storetest.New(t)
	regs := map[string]*prometheus.Registry{}
	for _, p := range append(loopPrograms, "scheduler") {
		reg := daemon.NewRegistry(p)
		daemon.NewDBMetrics(reg, p).Observe("Lint", time.Millisecond, nil)
		if p != "scheduler" {
			daemon.NewLoopMetrics(reg, p)
		}
		regs[p] = reg
	}
	assimilator.NewMetrics(regs["assimilator"])
	assimilator.RegisterBacklog(regs["assimilator"], st, "lint")
	dbpurge.NewMetrics(regs["db_purge"])
	statsexport.NewMetrics(regs["db_dump"])
	cache, err := shmcache.Create(filepath.Join(t.TempDir(), "shm"), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	feeder.NewMetrics(regs["feeder"])
	feeder.RegisterBacklog(regs["feeder"], st)
	filedeleter.NewMetrics(regs["file_deleter"])
	filedeleter.RegisterBacklog(regs["file_deleter"], st)
	transitioner.NewMetrics(regs["transitioner"])
	transitioner.RegisterBacklog(regs["transitioner"], st, time.Now)
	trickle.NewMetrics(regs["trickle_handler"])
	trickle.RegisterBacklog(regs["trickle_handler"], st, "")
	validator.NewMetrics(regs["validator"])
	validator.RegisterBacklog(regs["validator"], st, "lint")
	workgenerator.NewMetrics(regs["work_generator"])
	// The scheduler serves the data server and submission API too.
	_, key, _ := ed25519.GenerateKey(nil)
	if _, err := scheduler.New(scheduler.Config{URLBase: "http://127.0.0.1/", Fanout: 1024, RequestDelay: 5 * time.Second,
		MaxResultsPerRPC: 10, MaxInProgressPerCPU: 4, ARTrustValid: 10, MaxBodyBytes: 1 << 20, CommitLanes: 1},
		scheduler.Deps{Store: st, Cache: scheduler.NewCacheFile(filepath.Join(t.TempDir(), "cache")),
			UploadCertKey: key, Metrics: scheduler.NewMetrics(regs["scheduler"])}); err != nil {
		t.Fatal(err)
	}
	if _, err := scheduler.NewAccounts(scheduler.AccountOptions{Store: st, URLBase: "http://127.0.0.1/",
		Limit: scheduler.DefaultAccountLimit, Registerer: regs["scheduler"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := dataserver.New(dataserver.Options{DownloadDir: t.TempDir(), UploadDir: t.TempDir(),
		Registerer: regs["scheduler"]}); err != nil {
		t.Fatal(err)
	}
	submitapi.NewMetrics(regs["scheduler"])
	return regs
}

var metricName = regexp.MustCompile(`^taskserver_[a-z_]+_[a-z_]+$`)

// TestMetricNamesFollowTheScheme checks every metric of every program:
// taskserver_<program>_<what>, counters end in _total and nothing else
// does, a latency is a histogram in seconds, and each program has the loop
// and database metrics.
func TestMetricNamesFollowTheScheme(t *testing.T) {
	for p, reg := range programRegistries(t) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: gather: %v", p, err)
		}
		names := map[string]dto.MetricType{}
		for _, mf := range mfs {
			name := mf.GetName()
			names[name] = mf.GetType()
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || name == "taskserver_build_info" {
				continue
			}
			// The scheduler serves the data server, whose metrics keep its name.
			own := strings.HasPrefix(name, "taskserver_"+p+"_") ||
				p == "scheduler" && strings.HasPrefix(name, "taskserver_dataserver_")
			if !metricName.MatchString(name) || !own {
				t.Errorf("%s: metric %s is not taskserver_%s_<what>", p, name, p)
			}
			isCounter := mf.GetType() == dto.MetricType_COUNTER
			if isCounter != strings.HasSuffix(name, "_total") {
				t.Errorf("%s: metric %s is a %v: counters, and only counters, end in _total", p, name, mf.GetType())
			}
			if strings.Contains(name, "duration") && (mf.GetType() != dto.MetricType_HISTOGRAM || !strings.HasSuffix(name, "_seconds")) {
				t.Errorf("%s: latency %s is a %v, want a histogram in seconds", p, name, mf.GetType())
			}
			if mf.GetHelp() == "" {
				t.Errorf("%s: metric %s has no help", p, name)
			}
		}
		want := map[string]dto.MetricType{
			"db_query_duration_seconds": dto.MetricType_HISTOGRAM,
			"db_errors_total":           dto.MetricType_COUNTER,
			"db_retries_total":          dto.MetricType_COUNTER,
			"db_failovers_total":        dto.MetricType_COUNTER,
		}
		if p != "scheduler" {
			want["passes_total"] = dto.MetricType_COUNTER
			want["pass_errors_total"] = dto.MetricType_COUNTER
			want["pass_duration_seconds"] = dto.MetricType_HISTOGRAM
			want["sleep_seconds_total"] = dto.MetricType_COUNTER
			want["items_processed_total"] = dto.MetricType_COUNTER
			want["healthy"] = dto.MetricType_GAUGE
			want["consecutive_failed_passes"] = dto.MetricType_GAUGE
		}
		for n, typ := range want {
			if got, ok := names["taskserver_"+p+"_"+n]; !ok || got != typ {
				t.Errorf("%s: taskserver_%s_%s is %v (present %v), want a %v", p, p, n, got, ok, typ)
			}
		}
	}
}

// TestBacklogGaugesCountRows inserts rows in known states and reads every
// backlog gauge back through its program's registry.
func TestBacklogGaugesCountRows(t *testing.T) {
	st := storetest.New(t)
	appID := storetest.App(t, st, storetest.AppOptions{Name: "lint", UserFriendlyName: "Lint", Weight: 1}).ID
	past := time.Now().Add(-time.Hour).Unix()
	var wuIDs []int64
	for _, w := range []storetest.JobOptions{
		{Name: "a", TransitionTime: past, NeedValidate: true},
		{Name: "b", TransitionTime: past, AssimilateState: state.AssimilateReady},
		{Name: "c", TransitionTime: past + 7200, FileDeleteState: state.FileDeleteReady, NeedValidate: true},
	} {
		w.App = appID
		id := storetest.Job(t, st, w).ID
		wuIDs = append(wuIDs, id)
	}
	for _, r := range []storetest.InstanceOptions{
		{Name: "r1", ServerState: state.ServerUnsent},
		{Name: "r2", ServerState: state.ServerUnsent},
		{Name: "r3", ServerState: state.ServerUnsent},
		{Name: "r4", ServerState: state.ServerOver, FileDeleteState: state.FileDeleteReady},
	} {
		r.Job, r.App = wuIDs[0], appID
		storetest.Instance(t, st, r)
	}
	for _, tc := range []struct {
		program, name, label string
		register             func(reg prometheus.Registerer)
		want                 float64
	}{
		{"transitioner", "backlog_jobs_due", "", func(r prometheus.Registerer) { transitioner.RegisterBacklog(r, st, time.Now) }, 2},
		{"feeder", "backlog_results_unsent", "", func(r prometheus.Registerer) { feeder.RegisterBacklog(r, st) }, 3},
		{"validator", "backlog_jobs", "", func(r prometheus.Registerer) { validator.RegisterBacklog(r, st, "lint") }, 2},
		{"assimilator", "backlog_jobs", "", func(r prometheus.Registerer) { assimilator.RegisterBacklog(r, st, "lint") }, 1},
		{"file_deleter", "backlog_rows", "workunit", func(r prometheus.Registerer) { filedeleter.RegisterBacklog(r, st) }, 1},
		{"file_deleter", "backlog_rows", "result", func(r prometheus.Registerer) { filedeleter.RegisterBacklog(r, st) }, 1},
	} {
		reg := prometheus.NewRegistry()
		tc.register(reg)
		if got := gauge(t, reg, "taskserver_"+tc.program+"_"+tc.name, tc.label); got != tc.want {
			t.Errorf("%s_%s{%s} = %v, want %v", tc.program, tc.name, tc.label, got, tc.want)
		}
	}
}

// gauge returns the value of gauge name (with table label, if any) in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, table string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := table == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == table {
					match = true
				}
			}
			if match {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no gauge %s{table=%q}", name, table)
	return 0
}
