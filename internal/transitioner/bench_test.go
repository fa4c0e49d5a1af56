package transitioner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// benchJobs is the number of jobs each benchmark iteration transitions.
const benchJobs = 5000

// benchSeed inserts n jobs named <prefix>_<i> due at now with quorum and
// target 2, and, when withResults, two instances each in the state set
// gives (plus the job columns set sets).
func benchSeed(b *testing.B, st *store.Store, appID int64, prefix string, n int, now int64, wuSet, resSet string) {
	b.Helper()
	ctx := context.Background()
	const chunk = 1000
	for lo := 0; lo < n; lo += chunk {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO workunit (create_time, appid, name, xml_doc, transition_time, delay_bound,
rsc_fpops_est, min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, priority) VALUES `)
		for i := lo; i < min(n, lo+chunk); i++ {
			if i > lo {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "(%d, %d, '%s_%d', '<file_ref/>', %d, 3600, 1e12, 2, 2, 3, 6, 3, 0)", now, appID, prefix, i, now)
		}
		if _, err := st.DB().ExecContext(ctx, sb.String()); err != nil {
			b.Fatalf("seed jobs: %v", err)
		}
	}
	if resSet != "" {
		q := `INSERT INTO result (create_time, workunitid, server_state, outcome, name, appid, validate_state)
SELECT w.create_time, w.id, ?, ?, CONCAT(w.name, '_', k.n), w.appid, ?
FROM workunit w JOIN (SELECT 0 AS n UNION ALL SELECT 1) k WHERE w.name LIKE ?`
		var vs state.ValidateState
		if resSet == "valid" {
			vs = state.ValidateValid
		}
		if _, err := st.DB().ExecContext(ctx, q, state.ServerOver, state.OutcomeSuccess, vs, prefix+`\_%`); err != nil {
			b.Fatalf("seed instances: %v", err)
		}
	}
	if wuSet != "" {
		if _, err := st.DB().ExecContext(ctx, `UPDATE workunit SET `+wuSet+` WHERE name LIKE ?`, prefix+`\_%`); err != nil {
			b.Fatalf("seed job state: %v", err)
		}
	}
}

// benchTransitioner runs the transitioner over benchJobs jobs per
// iteration, seeded by seed, until a pass finds nothing due, and reports
// the cost per job.
func benchTransitioner(b *testing.B, wuSet, resSet string) {
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	m := storetest.NewMeter(b, st.DB().DB)
	now := time.Now().Unix()
	s := mustNew(New(Config{Mod: 1, Batch: 500, MaxOutputBytes: DefaultMaxOutputBytes, TailInterval: DefaultTailInterval},
		Deps{Store: st, Now: func() time.Time { return time.Unix(now, 0) }}))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		benchSeed(b, st, appID, fmt.Sprintf("b%d", i), benchJobs, now, wuSet, resSet)
		m.Start(b)
		for {
			n, err := s.RunOnce(ctx)
			if err != nil {
				b.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				break
			}
		}
		m.Stop(b)
	}
	m.Report(b, b.N*benchJobs, "job")
}

// BenchmarkTransitionCreate: fresh jobs get their two instances each.
func BenchmarkTransitionCreate(b *testing.B) { benchTransitioner(b, "", "") }

// BenchmarkTransitionValidate: both instances reported, the job is flagged
// need_validate.
func BenchmarkTransitionValidate(b *testing.B) { benchTransitioner(b, "", "init") }

// BenchmarkTransitionFileDelete: assimilated jobs and their instances are
// marked for file deletion.
func BenchmarkTransitionFileDelete(b *testing.B) {
	benchTransitioner(b, "assimilate_state = 2, canonical_resultid = id", "valid")
}
