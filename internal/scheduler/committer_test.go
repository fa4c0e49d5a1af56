package scheduler

import (
	"fmt"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/taskserver/taskserver/internal/state"
)

// TestConcurrentRequestsShareCommits: hosts reporting and asking at once
// are written in fewer transactions than requests, and each still gets its
// own outcome: every report recorded, every instance sent once.
func TestConcurrentRequestsShareCommits(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d lanes", lanes), func(t *testing.T) {
			t.Parallel()
			testConcurrentRequestsShareCommits(t, lanes)
		})
	}
}

func testConcurrentRequestsShareCommits(t *testing.T, lanes int) {
	f := setup(t, func(o *Options) { o.CommitLanes = lanes })
	const hosts, rounds = 12, 4
	for i := range hosts * rounds {
		f.addJob(fmt.Sprintf("j%d", i), job{})
	}
	type host struct {
		auth string
		id   int64
	}
	var hs []host
	for i := range hosts {
		u := f.newUser(fmt.Sprintf("u%d", i))
		rep := f.rpc(request{auth: u.Authenticator})
		hs = append(hs, host{u.Authenticator, rep.HostID})
	}
	var wg sync.WaitGroup
	sent := make([][]string, hosts)
	reported := make([]int, hosts)
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held := ""
			for seq := 1; seq <= rounds+1; seq++ {
				r := request{auth: h.auth, hostID: h.id, seqno: seq, workSecs: 1, instances: 1}
				if held != "" {
					r.results = []string{successReport(held)}
				}
				rep := f.rpc(r)
				if held != "" {
					if !acked(rep, held) {
						t.Errorf("host %d: report of %s not acked", h.id, held)
					}
					reported[i]++
				}
				held = ""
				if len(rep.Results) > 0 {
					held = rep.Results[0].Name
					sent[i] = append(sent[i], held)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	n := 0
	for _, s := range sent {
		for _, name := range s {
			if seen[name] {
				t.Fatalf("%s sent twice", name)
			}
			seen[name] = true
			n++
		}
	}
	if n < hosts*rounds-hosts {
		t.Fatalf("sent %d instances of %d", n, hosts*rounds)
	}
	nrep := 0
	for _, k := range reported {
		nrep += k
	}
	if got := f.count(`SELECT COUNT(*) FROM result WHERE server_state = ? AND outcome = ?`, state.ServerOver, state.OutcomeSuccess); got != nrep {
		t.Fatalf("results recorded as successes = %d, reports acked %d", got, nrep)
	}
	if got := f.count(`SELECT COUNT(*) FROM result WHERE server_state = ?`, state.ServerInProgress); got != n-nrep {
		t.Fatalf("results in progress = %d, want %d sent and not reported", got, n-nrep)
	}
	var m dto.Metric
	if err := f.svc.m.commitBatch.Write(&m); err != nil {
		t.Fatal(err)
	}
	if c := m.GetHistogram().GetSampleCount(); c == 0 || c > uint64(hosts*(rounds+1)) {
		t.Fatalf("commits = %d for %d requests", c, hosts*(rounds+1))
	}
}

// TestSiblingInstancesDoNotSplitTheCommit: the feeder caches a job's
// instances side by side, and a host gets one instance of a job; a host
// asking for several jobs gets them, each job once, in one transaction,
// not a transaction per job.
func TestSiblingInstancesDoNotSplitTheCommit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const jobs = 4
	for i := range jobs {
		f.addJob(fmt.Sprintf("pair%d", i), job{instances: 2})
	}
	commits := func() uint64 {
		var m dto.Metric
		if err := f.svc.m.commitBatch.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	first := f.rpc(request{workSecs: 0})
	before := commits()
	rep := f.rpc(request{hostID: first.HostID, seqno: 2, workSecs: 1e6, instances: jobs})
	got := map[int64]bool{}
	for _, r := range rep.Results {
		got[f.result(f.resultID(r.Name)).WorkunitID] = true
	}
	if len(rep.Results) != jobs || len(got) != jobs {
		t.Fatalf("sent %d instances of %d jobs, want one of each of the %d jobs", len(rep.Results), len(got), jobs)
	}
	if n := commits() - before; n != 1 {
		t.Errorf("the request's writes took %d transactions, want 1", n)
	}
}
