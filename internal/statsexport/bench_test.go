package statsexport

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// digits10e5 numbers 0 to 99999 by crossing five tables of digits: a row
// source every MySQL-compatible server runs, unlike recursive CTEs (capped
// at 1000 rows by MySQL's default) or MariaDB's sequence engine.
const digits10e5 = `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// fill100k inserts 10^5 users with credit, each with one host with
// credit, and 1000 teams they belong to.
func fill100k(b *testing.B, st *store.Store) {
	b.Helper()
	n := `(SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS n FROM ` + digits10e5 + ` a CROSS JOIN ` + digits10e5 +
		` b CROSS JOIN ` + digits10e5 + ` c CROSS JOIN ` + digits10e5 + ` e CROSS JOIN ` + digits10e5 + ` f)`
	storetest.Exec(b, st, `INSERT INTO team (create_time, userid, name, name_lc, total_credit, expavg_credit, expavg_time, country)
SELECT 1600000000, n + 1, CONCAT('Team ', n), CONCAT('team ', n), 1000 + n, n / 10, 1700000000, 'Germany'
FROM `+n+` t WHERE n < 1000`)
	storetest.Exec(b, st, `INSERT INTO user (create_time, email_addr, name, authenticator, total_credit, expavg_credit,
expavg_time, teamid, cross_project_id, country, url, has_profile)
SELECT 1600000000 + n, CONCAT('volunteer', n, '@example.org'), CONCAT('Volunteer José ', n), MD5(CONCAT('auth', n)),
n * 1.5 + 1, n / 100, 1700000000 + n, IF(n % 3 = 0, 0, n % 1000 + 1), MD5(CONCAT('cpid', n)), 'Germany',
IF(n % 2 = 0, '', CONCAT('https://v', n, '.example.org/')), n % 5 = 0
FROM `+n+` t`)
	storetest.Exec(b, st, `INSERT INTO host (create_time, userid, rpc_time, total_credit, expavg_credit, expavg_time,
timezone, domain_name, host_cpid, p_ncpus, p_vendor, p_model, p_fpops, p_iops, m_nbytes, m_swap, d_total, d_free,
os_name, os_version, avg_turnaround, p_membw, m_cache, n_bwup, n_bwdown, credit_per_cpu_sec)
SELECT 1600000000 + u.id, u.id, 1700000000 + u.id, u.id * 1.25 + 1, u.id / 200, 1700000000 + u.id, 3600,
CONCAT('host', u.id), MD5(CONCAT('host', u.id)), 8, 'GenuineIntel', 'Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz [Family 6 Model 158 Stepping 10]',
4.5e9, 1.5e10, 1.6e10, 2e9, 5e11, 2.5e11, 'Linux Debian', 'Debian GNU/Linux 12 (bookworm) [6.1.0-18-amd64|libc 2.36]',
3600, 1.25e9, 8388608, 1e6, 5e6, 0.0125
FROM user u`)
}

// BenchmarkExport100k times a whole dump of 10^5 users and 10^5 hosts
// (and 10^3 teams) with the daemon's default --batch.
func BenchmarkExport100k(b *testing.B) {
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	fill100k(b, st)
	dir := filepath.Join(b.TempDir(), "stats")
	ctx := context.Background()
	var res Result
	for b.Loop() {
		var err error
		res, err = Export(ctx, st, dir, benchBatch, time.Unix(1700000000, 0))
		if err != nil {
			b.Fatal(err)
		}
	}
	if res.Users != 100000 || res.Hosts != 100000 || res.Teams != 1000 {
		b.Fatalf("exported %d users, %d hosts, %d teams; want 10^5, 10^5, 10^3", res.Users, res.Hosts, res.Teams)
	}
	b.ReportMetric(float64(res.Bytes)/1e6, "MB")
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/export")
}

// benchBatch is the --batch the benchmark exports with.
var benchBatch = 5000 // db_dump's default --batch
