package chaos

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestDaemonDSNsStartAtTheirOwnNode: with failover every daemon gets
// every node, its own first, so the daemons spread over the nodes and
// each knows where to go when its node dies; without, its own node only.
func TestDaemonDSNsStartAtTheirOwnNode(t *testing.T) {
	nodes := []string{"root@tcp(127.0.0.1:1001)/", "root@tcp(127.0.0.1:1002)/", "root@tcp(127.0.0.1:1003)/"}
	one, err := daemonDSNs(nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := one(4), "root@tcp(127.0.0.1:1002)/"+database; got != want {
		t.Errorf("daemon on node 4 %% 3 = %q, want %q", got, want)
	}
	all, err := daemonDSNs(nodes, true)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(all(2), ",")
	want := []string{"127.0.0.1:1003", "127.0.0.1:1001", "127.0.0.1:1002"}
	if len(got) != 3 {
		t.Fatalf("failover DSNs = %q, want 3", got)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) || !strings.HasSuffix(got[i], "/"+database) {
			t.Errorf("failover DSN %d = %q, want node %s's, database %s", i, got[i], want[i], database)
		}
	}
}

// TestClusterReportNeedsANodeBack: a cluster run that lost nothing still
// fails when no node was killed, or one never came back.
func TestClusterReportNeedsANodeBack(t *testing.T) {
	ok := Report{Finished: true}
	for _, tc := range []struct {
		name string
		r    ClusterReport
		want bool
	}{
		{"rejoined", ClusterReport{Report: ok, Mode: "galera", NodeKills: 1, Rejoins: []NodeRejoin{{Node: "node2", Transfer: "IST"}}}, true},
		{"no kill", ClusterReport{Report: ok, Mode: "galera"}, false},
		{"never back", ClusterReport{Report: ok, Mode: "galera", NodeKills: 1, Rejoins: []NodeRejoin{{Node: "node2"}}}, false},
		{"single", ClusterReport{Report: ok, Mode: "single"}, true},
		{"lost a job", ClusterReport{Report: Report{Finished: true, JobsLost: 1}, Mode: "galera", NodeKills: 1,
			Rejoins: []NodeRejoin{{Node: "node2", Transfer: "IST"}}}, false},
	} {
		if got := tc.r.OK(); got != tc.want {
			t.Errorf("%s: OK() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMetricSumSuffix: failover counters are found whatever their
// namespace and summed over their series; absent ones are NaN, which
// leaves an accumulated counter as it was.
func TestMetricSumSuffix(t *testing.T) {
	series := func(code string, v float64) *dto.Metric {
		return &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("code"), Value: proto.String(code)}},
			Counter: &dto.Counter{Value: proto.Float64(v)}}
	}
	fams := map[string]*dto.MetricFamily{
		"taskserver_db_retries_total": {Metric: []*dto.Metric{series("1213", 3), series("1047", 5), series("1213", 1)}},
	}
	if got := metricSumSuffix(fams, suffixRetries, "code", "1213"); got != 4 {
		t.Errorf("retries{code=1213} = %v, want 4", got)
	}
	if got := metricSumSuffix(fams, suffixRetries, "", ""); got != 9 {
		t.Errorf("retries = %v, want 9", got)
	}
	if got := metricSumSuffix(fams, suffixFailovers, "", ""); !math.IsNaN(got) {
		t.Errorf("absent failovers = %v, want NaN", got)
	}
}

// TestClusterReportJSONKeys: report.json holds the chaos run's outcome
// keys at the top level, beside the cluster's own, as `make cluster`
// promises.
func TestClusterReportJSONKeys(t *testing.T) {
	dir := t.TempDir()
	r := ClusterReport{Report: Report{Faults: map[string]int{FaultNodeKill: 1}, Finished: true}, Mode: "galera", NodeKills: 1}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	for _, k := range []string{"faults", "jobs", "jobs_lost", "duplicate_assimilations", "duplicate_credit",
		"same_user_twice", "reports_lost", "files_leaked", "files_deleted_early", "wrong_outputs", "counts_off", "finished",
		"node_kills", "failovers", "certification_conflicts", "claims_lost_fraction", "jobs_per_minute",
		"db_cpu_seconds", "db_cpu_ms_per_instance", "instances", "rejoins"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report.json lacks key %q", k)
		}
	}
}
