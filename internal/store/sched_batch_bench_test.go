package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// BenchmarkSchedulerCommit measures one group commit after another, each of
// a few requests (as make bench-scale's 8 connections make them) and of
// many: every request reports an instance of its host, is sent one of
// another job and writes its host's row. b.N is the number of commits;
// the figures are per request. Run it on a private server with a fixed
// count, e.g.
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3312)/' go test -run '^$' -bench SchedulerCommit -benchtime 500x ./internal/store
func BenchmarkSchedulerCommit(b *testing.B) {
	storetest.SkipWithoutServer(b)
	for _, k := range []int{1, 4, 32} {
		b.Run(fmt.Sprintf("requests=%d", k), func(b *testing.B) {
			ctx := context.Background()
			st := storetest.New(b)
			app := storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
			users, hosts := make([]int64, k), make([]int64, k)
			for i := range k {
				users[i] = storetest.User(b, st, storetest.UserOptions{CreateTime: 1, EmailAddr: fmt.Sprintf("u%d@example.com", i),
					Name: fmt.Sprintf("u%d", i), Authenticator: fmt.Sprintf("k%d", i)}).ID
				hosts[i] = storetest.Host(b, st, storetest.HostOptions{CreateTime: 1, User: users[i]}).ID
			}
			batches := make([]store.SchedBatch, b.N)
			for n := range b.N {
				for i := range k {
					name := fmt.Sprintf("j%d_%d", n, i)
					jr := storetest.Job(b, st, storetest.JobOptions{CreateTime: 1, App: app, Name: name + "r",
						TransitionTime: state.NoTransition, DelayBound: 100}).ID
					r := storetest.Instance(b, st, storetest.InstanceOptions{CreateTime: 1, Job: jr, ServerState: state.ServerInProgress,
						Host: hosts[i], User: users[i], SentTime: 10, Name: name + "r_0"}).ID
					js := storetest.Job(b, st, storetest.JobOptions{CreateTime: 1, App: app, Name: name + "s",
						TransitionTime: state.NoTransition, DelayBound: 100}).ID
					s := storetest.Instance(b, st, storetest.InstanceOptions{CreateTime: 1, Job: js, ServerState: state.ServerUnsent,
						Name: name + "s_0"}).ID
					now := int64(1000 + n)
					bt := &batches[n]
					bt.DailyResultQuota = 500
					bt.Reports = append(bt.Reports, store.SchedReport{ResultID: r, WorkunitID: jr, HostID: hosts[i],
						Outcome: state.OutcomeSuccess, ClientState: 5, CPUTime: 10.5, ElapsedTime: 11.25,
						StderrOut: "<stderr_txt>done</stderr_txt>", XMLDocOut: "<file_info/>", ClaimedCredit: 1.5, Now: now})
					bt.Sends = append(bt.Sends, store.SchedSend{ResultID: s, WorkunitID: js, HostID: hosts[i], UserID: users[i],
						AppVersionID: 1, AppVersionNum: 100, FlopsEstimate: 1e9, ReportDeadline: now + 100, Now: now})
					bt.Hosts = append(bt.Hosts, store.SchedHost{Host: row.Host{ID: hosts[i], RPCSeqno: int64(n + 1), RPCTime: now,
						LastIPAddr: "10.0.0.1"}})
				}
			}
			m := storetest.NewMeter(b, st.DB().DB)
			b.StopTimer()
			b.ResetTimer()
			m.Start(b)
			for n := range b.N {
				out, err := st.SchedulerCommit(ctx, batches[n])
				if err != nil {
					b.Fatal(err)
				}
				for i := range k {
					if out.Reports[i].Err != nil || out.Sends[i] != nil {
						b.Fatalf("batch %d request %d: report %v, send %v", n, i, out.Reports[i].Err, out.Sends[i])
					}
				}
			}
			m.Stop(b)
			m.Report(b, b.N*k, "req")
		})
	}
}
