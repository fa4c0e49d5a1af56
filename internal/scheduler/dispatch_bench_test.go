package scheduler

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/feeder"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// The dispatch benchmark is the paper's dispatch phase (seed 003 §4.2) against
// the real Service and a real database: 64 hosts, each reporting its previous
// instance as a success and asking for one new one, over HTTP. The load
// generator and the feeder run in a child process (this test binary again,
// TestDispatchBenchClient), so the CPU this process spends is the
// scheduler's alone. Run it on a private server, e.g.
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3312)/' go test -run '^$' -bench Dispatch -benchtime 20000x ./internal/scheduler
//
// (BENCH_CLIENTS=8 for fewer hosts at once: see benchClients.)
// b.N is the number of scheduler requests.

const envClient = "TASKSERVER_DISPATCH_CLIENT" // JSON benchClientConfig: set in the child only

// benchClients is how many hosts request at once: 64, or BENCH_CLIENTS.
// With 8 (make bench-scale's quoted level) a group commit holds a few
// requests, and its fixed cost per statement and round trip shows.
var benchClients = func() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 64
}()

// benchClientConfig is what the child process needs.
type benchClientConfig struct {
	URL       string   `json:"url"`
	DSN       string   `json:"dsn"`
	CachePath string   `json:"cache_path"`
	Requests  int      `json:"requests"`
	Auths     []string `json:"auths"`
	HostIDs   []int64  `json:"host_ids"`
}

// benchClientResult is what the child prints when its load is done.
type benchClientResult struct {
	Requests int     `json:"requests"`
	Reported int     `json:"reported"`
	Sent     int     `json:"sent"`
	Failed   int     `json:"failed"`
	WallS    float64 `json:"wall_s"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

func BenchmarkDispatch(b *testing.B) {
	storetest.SkipWithoutServer(b)
	ctx := context.Background()
	dsn := storetest.NewDatabase(b)
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 16, Prepared: os.Getenv("BENCH_UNPREPARED") == ""})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	key, err := uploadKey()
	if err != nil {
		b.Fatal(err)
	}
	cfg := benchPopulate(b, st, b.N+benchClients+16)
	cfg.DSN = dsn
	cfg.Requests = b.N
	cfg.CachePath = filepath.Join(b.TempDir(), "cache")

	// New projects sign upload certificates with Ed25519 (taskctl keys
	// generate); the RSA key is only the fallback.
	_, edKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	schedCfg := testConfig()
	schedCfg.Fanout, schedCfg.ProjectName, schedCfg.RequestDelay = 1024, "bench", 5*time.Second
	// Plan classes and the daily quota (the flag's default) are on the
	// dispatch path, with each host's host_app_version rows.
	schedCfg.PlanClasses, schedCfg.DailyResultQuota = testPlanClasses(b), 500
	svc, err := New(schedCfg, Deps{Store: st, Cache: NewCacheFile(cfg.CachePath), UploadKey: key, UploadCertKey: edKey, Metrics: NewMetrics(reg)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(svc)
	defer srv.Close()
	cfg.URL = srv.URL + "/scheduler"

	m := storetest.NewMeter(b, st.DB().DB)
	conf, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDispatchBenchClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), envClient+"="+string(conf))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	goLoad, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		goLoad.Close() // a child still waiting for "go" reads EOF and ends
		_ = cmd.Wait()
	}()

	var (
		res     benchClientResult
		started bool
	)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			b.StopTimer()
			b.ResetTimer()
			m.Start(b)
			if _, err := io.WriteString(goLoad, "go\n"); err != nil {
				b.Fatal(err)
			}
			started = true
		case strings.HasPrefix(line, "done "):
			m.Stop(b)
			if err := json.Unmarshal([]byte(line[len("done "):]), &res); err != nil {
				b.Fatal(err)
			}
			n := float64(res.Requests)
			// Statements include the feeder's (a few per hundred requests);
			// cpu-ms is the scheduler's alone, the load runs in the child.
			m.Report(b, res.Requests, "op")
			b.ReportMetric(n/res.WallS, "req/s")
			b.ReportMetric(res.P50MS, "p50-ms")
			b.ReportMetric(res.P99MS, "p99-ms")
			b.ReportMetric(float64(res.Failed), "failed")
			b.ReportMetric(float64(res.Sent)/n, "sent/op")
			b.ReportMetric(float64(res.Reported)/n, "reported/op")
			// Where a request's time goes: the mean time in each shared
			// database stage, and the mean batch of each.
			for name, v := range benchStageMeans(b, reg) {
				b.ReportMetric(v, name)
			}
		}
	}
	if !started || res.Requests == 0 {
		b.Fatal("load generator ended without a result")
	}
	var over int
	if err := st.DB().Get(&over, `SELECT COUNT(*) FROM result WHERE server_state = ? AND outcome = ?`,
		state.ServerOver, state.OutcomeSuccess); err != nil {
		b.Fatal(err)
	}
	if over != res.Reported {
		b.Fatalf("results OVER/SUCCESS = %d, reports acked = %d", over, res.Reported)
	}
}

// benchPopulate creates one app, one user and host per client and jobs with
// two unsent instances each, at least n instances in all.
func benchPopulate(b *testing.B, st *store.Store, n int) benchClientConfig {
	pid := storetest.Platform(b, st, storetest.PlatformOptions{CreateTime: 1, Name: platformName, UserFriendlyName: "Linux"}).ID
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo app", Weight: 1}).ID
	storetest.AppVersion(b, st, storetest.AppVersionOptions{CreateTime: 1, App: appID, VersionNum: 100, Platform: pid})
	// Plan-class versions on the dispatch path: the two-thread one goes to
	// the hosts with two CPUs, the CUDA one is refused to every host (none
	// has a GPU), as most hosts of a GPU project are.
	storetest.AppVersion(b, st, storetest.AppVersionOptions{CreateTime: 1, App: appID, VersionNum: 100, Platform: pid, PlanClass: "mt"})
	storetest.AppVersion(b, st, storetest.AppVersionOptions{CreateTime: 1, App: appID, VersionNum: 100, Platform: pid, PlanClass: "cuda"})
	var cfg benchClientConfig
	for i := range benchClients {
		auth := fmt.Sprintf("benchauth%056d", i)
		uid := storetest.User(b, st, storetest.UserOptions{CreateTime: 1, EmailAddr: fmt.Sprintf("u%d@example.org", i),
			Name: fmt.Sprintf("u%d", i), Authenticator: auth}).ID
		hid := storetest.Host(b, st, storetest.HostOptions{CreateTime: 1, User: uid, PNCPUs: 1, PFpops: 1e9,
			HostCPID: fmt.Sprintf("cpid%d", i), OSName: "Linux Debian", DomainName: "vm", OnFrac: 1, ActiveFrac: 1}).ID
		cfg.Auths = append(cfg.Auths, auth)
		cfg.HostIDs = append(cfg.HostIDs, hid)
	}
	db := st.DB()
	const chunk = 500
	for first := 0; first < (n+1)/2; first += chunk {
		var wq, rq strings.Builder
		var wargs, rargs []any
		wq.WriteString(`INSERT INTO workunit (create_time, appid, name, xml_doc, rsc_fpops_est, rsc_fpops_bound,
delay_bound, transition_time, min_quorum, target_nresults) VALUES `)
		last := min(first+chunk, (n+1)/2)
		for j := first; j < last; j++ {
			name := fmt.Sprintf("bwu%07d", j)
			doc, _ := jobxml.FormatWorkunit(jobxml.Workunit{CommandLine: "--rounds 3",
				Inputs: []jobxml.InputFile{{Name: name + "_in", OpenName: "in", Nbytes: 18, MD5: "eae797ff01dd963522f1b6a54ac3242a", CopyFile: true}}})
			if j > first {
				wq.WriteString(",")
			}
			wq.WriteString("(1, ?, ?, ?, 1e10, 1e11, 86400, ?, 2, 2)")
			wargs = append(wargs, appID, name, doc, state.NoTransition)
		}
		if _, err := db.Exec(wq.String(), wargs...); err != nil {
			b.Fatal(err)
		}
		rq.WriteString(`INSERT INTO result (create_time, workunitid, server_state, name, xml_doc_in, appid) VALUES `)
		var ids []int64
		if err := db.Select(&ids, `SELECT id FROM workunit WHERE name >= ? AND name < ? ORDER BY id`,
			fmt.Sprintf("bwu%07d", first), fmt.Sprintf("bwu%07d", last)); err != nil {
			b.Fatal(err)
		}
		for k, id := range ids {
			for c := range 2 {
				rname := fmt.Sprintf("bwu%07d_%d", first+k, c)
				in, _ := jobxml.FormatResult(storetest.Outputs(rname, []string{"out"}, 1e5))
				if k > 0 || c > 0 {
					rq.WriteString(",")
				}
				rq.WriteString("(1, ?, ?, ?, ?, ?)")
				rargs = append(rargs, id, state.ServerUnsent, rname, in, appID)
			}
		}
		if _, err := db.Exec(rq.String(), rargs...); err != nil {
			b.Fatal(err)
		}
	}
	return cfg
}

// TestDispatchBenchClient is the child process of BenchmarkDispatch: the
// feeder and the simulated hosts. Without its environment it does nothing.
func TestDispatchBenchClient(t *testing.T) {
	conf := os.Getenv(envClient)
	if conf == "" {
		t.Skip("run by BenchmarkDispatch only")
	}
	var cfg benchClientConfig
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dc, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dc.FormatDSN(), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cache, err := shmcache.Create(cfg.CachePath, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	fd, err := feeder.New(feeder.Config{Mod: 1, Batch: 500, Slots: 1000, ReclaimAfter: time.Minute, TablesInterval: 10 * time.Second},
		feeder.Deps{Store: st, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			n, err := fd.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			if n == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
	var (
		left      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		res       benchClientResult
	)
	left.Store(int64(cfg.Requests))
	// The parent takes its first samples once the set-up is done and
	// InnoDB's background work of it has drained, then says go.
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("waiting for the benchmark to start the load: %v", err)
	}
	start := time.Now()
	var cw sync.WaitGroup
	for i := range cfg.Auths {
		cw.Add(1)
		go func() {
			defer cw.Done()
			var held string
			var lat []time.Duration
			var reported, sent, failed int
			for seq := 1; left.Add(-1) >= 0; seq++ {
				r := request{auth: cfg.Auths[i], hostID: cfg.HostIDs[i], seqno: seq, workSecs: 1, instances: 1,
					cpid: fmt.Sprintf("cpid%d", i), fpops: 1e9, memory: 4e9, diskFree: 1e11, ncpus: 1 + i%2}
				if held != "" {
					r.results = []string{successReport(held)}
				}
				t0 := time.Now()
				resp, err := client.Post(cfg.URL, "application/x-www-form-urlencoded", strings.NewReader(r.body()))
				if err != nil {
					failed++
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					failed++
					continue
				}
				rep, err := protocol.ParseSchedulerReply(strings.NewReader(string(body)))
				if err != nil {
					failed++
					continue
				}
				if held != "" && acked(rep, held) {
					reported++
					held = ""
				}
				if len(rep.Results) > 0 && held == "" {
					held = rep.Results[0].Name
					sent++
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			res.Reported += reported
			res.Sent += sent
			res.Failed += failed
			mu.Unlock()
		}()
	}
	cw.Wait()
	res.WallS = time.Since(start).Seconds()
	res.Requests = len(latencies)
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50MS = float64(latencies[n/2]) / 1e6
		res.P99MS = float64(latencies[min(n*99/100, n-1)]) / 1e6
	}
	out, _ := json.Marshal(res)
	fmt.Println("done " + string(out))
	cancel()
	wg.Wait()
	client.CloseIdleConnections()
}

// benchStageMeans returns the means of the scheduler's shared-stage
// histograms: milliseconds in the read and commit stages, and requests per
// read and per commit.
func benchStageMeans(b *testing.B, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil || h.GetSampleCount() == 0 {
				continue
			}
			mean := h.GetSampleSum() / float64(h.GetSampleCount())
			switch name := mf.GetName(); {
			case strings.HasSuffix(name, "_stage_duration_seconds"):
				out[m.GetLabel()[0].GetValue()+"-ms"] = mean * 1e3
			case strings.HasSuffix(name, "_read_batch_requests"):
				out["read-batch"] = mean
			case strings.HasSuffix(name, "_commit_batch_requests"):
				out["commit-batch"] = mean
			}
		}
	}
	return out
}
