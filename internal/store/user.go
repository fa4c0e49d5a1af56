package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/taskserver/taskserver/internal/row"
)

const userColumns = `id, create_time, email_addr, name, authenticator, passwd_hash, total_credit,
expavg_credit, expavg_time, teamid, cross_project_id, submit_allowed, project_prefs`

const userInsert = `INSERT INTO user (create_time, email_addr, name, authenticator, passwd_hash,
total_credit, expavg_credit, expavg_time, teamid, cross_project_id, submit_allowed, project_prefs)
VALUES (:create_time, :email_addr, :name, :authenticator, :passwd_hash,
:total_credit, :expavg_credit, :expavg_time, :teamid, :cross_project_id, :submit_allowed, :project_prefs)`

// UserInsert adds a user and returns its id.
func (s *Store) UserInsert(ctx context.Context, u row.User) (int64, error) {
	return s.insert(ctx, "user", userInsert, u)
}

// UserGet returns user id, or ErrNotFound.
func (s *Store) UserGet(ctx context.Context, id int64) (row.User, error) {
	var u row.User
	err := s.db.GetContext(ctx, &u, `SELECT `+userColumns+` FROM user WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("user %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return u, fmt.Errorf("get user %d: %w", id, err)
	}
	return u, nil
}

const hostColumns = `id, create_time, userid, rpc_seqno, rpc_time, total_credit, expavg_credit, expavg_time,
timezone, domain_name, last_ip_addr, host_cpid, p_ncpus, p_vendor, p_model, p_fpops, p_iops,
m_nbytes, m_swap, d_total, d_free, os_name, os_version, on_frac, active_frac, nresults_today, avg_turnaround,
consecutive_valid, error_streak, p_features, coprocs, client_version`

// hostSelect is hostColumns as a SELECT list: coprocs is NULL in rows older
// than schema 6.
var hostSelect = strings.Replace(hostColumns, " coprocs,", " COALESCE(coprocs, '') AS coprocs,", 1)

const hostInsert = `INSERT INTO host (create_time, userid, rpc_seqno, rpc_time, total_credit, expavg_credit,
expavg_time, timezone, domain_name, last_ip_addr, host_cpid, p_ncpus, p_vendor, p_model, p_fpops, p_iops,
m_nbytes, m_swap, d_total, d_free, os_name, os_version, on_frac, active_frac, nresults_today, avg_turnaround,
p_features, coprocs, client_version)
VALUES (:create_time, :userid, :rpc_seqno, :rpc_time, :total_credit, :expavg_credit,
:expavg_time, :timezone, :domain_name, :last_ip_addr, :host_cpid, :p_ncpus, :p_vendor, :p_model, :p_fpops, :p_iops,
:m_nbytes, :m_swap, :d_total, :d_free, :os_name, :os_version, :on_frac, :active_frac, :nresults_today, :avg_turnaround,
:p_features, :coprocs, :client_version)`

// HostInsert adds a host and returns its id.
func (s *Store) HostInsert(ctx context.Context, h row.Host) (int64, error) {
	return s.insert(ctx, "host", hostInsert, h)
}

// HostGet returns host id, or ErrNotFound.
func (s *Store) HostGet(ctx context.Context, id int64) (row.Host, error) {
	var h row.Host
	err := s.db.GetContext(ctx, &h, `SELECT `+hostSelect+` FROM host WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return h, fmt.Errorf("host %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return h, fmt.Errorf("get host %d: %w", id, err)
	}
	return h, nil
}
