package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

// The statistics export's reads (package statsexport). Each lists the next
// rows after a cursor, by id, so an export of millions of rows holds one
// batch at a time and no query runs long. The conditions are BOINC
// db_dump's: only rows with credit, and neither a deleted account
// (authenticator starting "deleted") nor a deleted host (domain name
// "deleted") nor a host of no user.
const (
	statsUserList = `SELECT id, create_time, name, email_addr, cross_project_id, total_credit, expavg_credit,
expavg_time, teamid, country, url, has_profile
FROM user
WHERE id > ? AND total_credit > 0 AND authenticator NOT LIKE 'deleted%'
ORDER BY id LIMIT ?`

	statsTeamList = `SELECT t.id, t.type, t.name, t.userid, t.total_credit, t.expavg_credit, t.expavg_time,
t.create_time, t.url, t.name_html, t.description, t.country,
u.id IS NOT NULL AS founder_found, COALESCE(u.name, '') AS founder_name
FROM team t LEFT JOIN user u ON u.id = t.userid
WHERE t.id > ? AND t.total_credit > 0
ORDER BY t.id LIMIT ?`

	statsHostList = `SELECT h.id, h.userid, h.create_time, h.rpc_time, h.total_credit, h.expavg_credit, h.expavg_time,
h.timezone, h.host_cpid, h.p_ncpus, h.p_vendor, h.p_model, h.p_fpops, h.p_iops, h.p_membw, h.m_nbytes,
h.m_cache, h.m_swap, h.d_total, h.d_free, h.n_bwup, h.n_bwdown, h.avg_turnaround, h.credit_per_cpu_sec,
h.os_name, h.os_version,
u.id IS NOT NULL AS owner_found, COALESCE(u.show_hosts, 0) AS owner_show_hosts
FROM host h LEFT JOIN user u ON u.id = h.userid
WHERE h.id > ? AND h.total_credit > 0 AND h.domain_name <> 'deleted' AND h.userid <> 0
ORDER BY h.id LIMIT ?`
)

// StatsUserList returns up to limit users with an id above afterID that
// the statistics export writes, by id.
func (s *Store) StatsUserList(ctx context.Context, afterID int64, limit int) ([]row.StatsUser, error) {
	var out []row.StatsUser
	if err := s.db.SelectContext(ctx, &out, statsUserList, afterID, limit); err != nil {
		return nil, fmt.Errorf("list users for the statistics export after %d: %w", afterID, err)
	}
	return out, nil
}

// StatsTeamList returns up to limit teams with an id above afterID that
// the statistics export writes, by id, each with its founder's name.
func (s *Store) StatsTeamList(ctx context.Context, afterID int64, limit int) ([]row.StatsTeam, error) {
	var out []row.StatsTeam
	if err := s.db.SelectContext(ctx, &out, statsTeamList, afterID, limit); err != nil {
		return nil, fmt.Errorf("list teams for the statistics export after %d: %w", afterID, err)
	}
	return out, nil
}

// StatsHostList returns up to limit hosts with an id above afterID that
// the statistics export writes, by id, each with what the export needs of
// its owner.
func (s *Store) StatsHostList(ctx context.Context, afterID int64, limit int) ([]row.StatsHost, error) {
	var out []row.StatsHost
	if err := s.db.SelectContext(ctx, &out, statsHostList, afterID, limit); err != nil {
		return nil, fmt.Errorf("list hosts for the statistics export after %d: %w", afterID, err)
	}
	return out, nil
}
