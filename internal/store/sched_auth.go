package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// userHostColumns is hostColumns read through a LEFT JOIN as h: each column
// named "host.<column>" (sqlx's nested struct form) and never NULL.
var userHostColumns = func() string {
	var cols []string
	for _, c := range strings.Split(hostColumns, ",") {
		c = strings.TrimSpace(c)
		zero := "0"
		switch c {
		case "domain_name", "last_ip_addr", "host_cpid", "p_vendor", "p_model", "os_name", "os_version", "p_features", "coprocs":
			zero = "''"
		}
		cols = append(cols, fmt.Sprintf("COALESCE(h.%s, %s) AS `host.%s`", c, zero, c))
	}
	return strings.Join(cols, ", ")
}()

// userTeamName is the name of user u's team as a column of the user's
// read: empty for none, or for a team that no longer exists. A scheduler
// reply carries it (BOINC's scheduler looks the team up by id on every
// request); here it costs a primary-key lookup inside the same query.
const userTeamName = `COALESCE((SELECT t.name FROM team t WHERE t.id = u.teamid AND u.teamid <> 0), '') AS team_name`

// trickleDownQueued is, as a column of a read of host h, whether messages
// wait for it in msg_to_host (handled 0): a request of a host with none,
// nearly every one, then costs no read of its own for them (one indexed
// lookup here). False when h is not found.
const trickleDownQueued = `EXISTS (SELECT 1 FROM msg_to_host m WHERE m.hostid = h.id AND m.handled = 0) AS trickle_down_queued`

// userTeamRow is a user and the name of its team.
type userTeamRow struct {
	row.User
	TeamName string `db:"team_name"`
}

// userHostRow is a user, its team's name, and the host a request named,
// if it exists.
type userHostRow struct {
	userTeamRow
	Host              row.Host `db:"host"`
	HostFound         bool     `db:"host_found"`
	TrickleDownQueued bool     `db:"trickle_down_queued"`
}

var userHostGet = `SELECT ` + prefixed("u.", userColumns) + `, ` + userTeamName + `, ` + userHostColumns +
	`, h.id IS NOT NULL AS host_found, ` + trickleDownQueued + `
FROM user u LEFT JOIN host h ON h.id = ? WHERE u.authenticator = ?`

// UserHostGet returns, in one query, the user whose account key is auth
// (ErrNotFound if none) with its team's name, and host hostID whoever owns
// it (HostFound false if there is no such host); Held stays empty.
// Callers compare the key and the host's owner themselves.
func (s *Store) UserHostGet(ctx context.Context, auth string, hostID int64) (UserHostHeld, error) {
	var r userHostRow
	err := s.hotGet(ctx, &r, userHostGet, hostID, auth)
	if errors.Is(err, sql.ErrNoRows) {
		return UserHostHeld{}, ErrNotFound
	}
	if err != nil {
		return UserHostHeld{}, fmt.Errorf("get user by authenticator and host %d: %w", hostID, err)
	}
	return UserHostHeld{User: r.User, UserFound: true, TeamName: r.TeamName, Host: r.Host, HostFound: r.HostFound,
		TrickleDownQueued: r.TrickleDownQueued}, nil
}

// prefixed is the column list cols with each column qualified by p.
func prefixed(p, cols string) string {
	var out []string
	for _, c := range strings.Split(cols, ",") {
		out = append(out, p+strings.TrimSpace(c))
	}
	return strings.Join(out, ", ")
}

// heldColumns is resultListHostInProgress's column list read through LEFT
// JOINs: each column named "held.<column>" and never NULL.
const heldColumns = "COALESCE(r.id, 0) AS `held.id`, COALESCE(r.name, '') AS `held.name`, " +
	"COALESCE(r.workunitid, 0) AS `held.workunitid`, COALESCE(w.appid, 0) AS `held.appid`, " +
	"COALESCE(r.report_deadline, 0) AS `held.report_deadline`, COALESCE(r.sent_time, 0) AS `held.sent_time`, " +
	"COALESCE(r.app_version_id, 0) AS `held.app_version_id`, COALESCE(r.app_version_num, 0) AS `held.app_version_num`, " +
	"COALESCE(w.rsc_fpops_est, 0) AS `held.rsc_fpops_est`, " +
	"COALESCE(w.canonical_resultid <> 0 OR w.error_mask <> 0, 0) AS `held.job_done`, " +
	"COALESCE(r.xml_doc_in, '') AS `held.xml_doc_in`, COALESCE(r.file_delete_state, 0) AS `held.file_delete_state`"

// userHostHeldRow is a user, the host a request named, and one of the
// host's instances in progress (id 0 when it has none).
type userHostHeldRow struct {
	userHostRow
	Held HostResult `db:"held"`
	// HAV is havJSON's value: the host's host_app_version rows.
	HAV []byte `db:"hav"`
}

// The user is one row (authenticator is unique) and the host one (by id),
// so the rows are the host's instances in progress, or one row without.
// No ORDER BY: on the outer-joined table it makes MariaDB sort the rows,
// TEXT column and all, in a temporary table (three times the query's
// cost); the rows come in res_host_state's order, which is by id. The
// limit only bounds a host holding thousands of instances. The instances
// are matched to the host id itself, not to h.id: joined to h.id, MariaDB
// reads every instance in progress (res_server_state) and filters. The
// host's host_app_version rows ride along as one JSON column (repeated on
// each row: a few hundred bytes for the usual one to three versions, where
// each row already carries an instance's xml_doc_in).
var userHostHeldGet = `SELECT ` + prefixed("u.", userColumns) + `, ` + userTeamName + `, ` + userHostColumns +
	`, h.id IS NOT NULL AS host_found, ` + trickleDownQueued + `, ` + heldColumns + `, ` + havJSON + ` AS hav
FROM user u LEFT JOIN host h ON h.id = ?
LEFT JOIN result r ON r.hostid = ? AND r.server_state = ?
LEFT JOIN workunit w ON w.id = r.workunitid
WHERE u.authenticator = ?
LIMIT ?`

// UserHostHeldGet is UserHostGet, ResultListHostInProgress and
// HostAppVersionListByHost of host hostID in one query: a scheduler request
// that reports or asks for work needs all of them, and in the usual case
// (the host is the user's own) one round trip serves it. The instances and
// host_app_version rows are read whoever owns the host; the caller uses
// them only once it has decided the host is the request's. No user with
// key auth is ErrNotFound.
func (s *Store) UserHostHeldGet(ctx context.Context, auth string, hostID int64, limit int) (UserHostHeld, error) {
	var rows []userHostHeldRow
	err := s.hotSelect(ctx, &rows, userHostHeldGet, hostID, hostID, hostID, state.ServerInProgress, auth, limit)
	if err != nil {
		return UserHostHeld{}, fmt.Errorf("get user by authenticator, host %d and its results in progress: %w", hostID, err)
	}
	if len(rows) == 0 {
		return UserHostHeld{}, ErrNotFound
	}
	held := make([]HostResult, 0, len(rows))
	for _, r := range rows {
		if r.Held.ID != 0 {
			held = append(held, r.Held)
		}
	}
	f := UserHostHeld{User: rows[0].User, UserFound: true, TeamName: rows[0].TeamName, Host: rows[0].Host,
		HostFound: rows[0].HostFound, TrickleDownQueued: rows[0].TrickleDownQueued, Held: held}
	if f.HostFound {
		if f.HostAppVersions, err = parseHostAppVersions(hostID, rows[0].HAV); err != nil {
			return UserHostHeld{}, err
		}
	}
	return f, nil
}

// AuthHost is what a scheduler request names: an account key and a host id
// (0 for none). WantHeld asks for the host's instances in progress too.
type AuthHost struct {
	Auth     string
	HostID   int64
	WantHeld bool
}

// UserHostHeld is what UserHostHeldList found for one AuthHost: the user
// whose key matches (UserFound) and the name of its team ("" for none),
// the host (HostFound, whoever owns it), and
// when asked the host's instances in progress, by id, and its
// host_app_version rows (what it has shown of each version: estimates and
// daily quotas), by version id. TrickleDownQueued says trickle-down
// messages wait for the host (see MsgToHostTake).
type UserHostHeld struct {
	User              row.User
	UserFound         bool
	TeamName          string
	Host              row.Host
	HostFound         bool
	TrickleDownQueued bool
	Held              []HostResult
	HostAppVersions   []row.HostAppVersion
}

var (
	hostListByIDs  = `SELECT ` + hostSelect + `, ` + trickleDownQueued + ` FROM host h WHERE id IN (?)`
	userListByAuth = `SELECT ` + prefixed("u.", userColumns) + `, ` + userTeamName + ` FROM user u WHERE u.authenticator IN (?)`
)

const (
	// No ORDER BY: the IN list is a range scan of res_host_state, so rows
	// come by host id, then by instance id.
	heldListByHosts = `SELECT r.hostid, r.id, r.name, r.workunitid, w.appid, r.report_deadline, r.sent_time,
r.app_version_id, r.app_version_num, w.rsc_fpops_est, (w.canonical_resultid <> 0 OR w.error_mask <> 0) AS job_done,
COALESCE(r.xml_doc_in, '') AS xml_doc_in, r.file_delete_state
FROM result r JOIN workunit w ON w.id = r.workunitid
WHERE r.hostid IN (?) AND r.server_state = ?`
)

// hostQueuedRow is a host and whether trickle-down messages wait for it.
type hostQueuedRow struct {
	row.Host
	TrickleDownQueued bool `db:"trickle_down_queued"`
}

// heldRow is an instance in progress with its host.
type heldRow struct {
	HostID int64 `db:"hostid"`
	HostResult
}

// UserHostHeldList is UserHostHeldGet for many requests at once, in four
// statements whatever their number: the scheduler's concurrent requests
// share them (its reader), which saves the per-statement cost of one query
// each. Each key's user is the row whose key equals it ignoring case, as
// the column's collation does; callers compare the key exactly (in
// constant time) themselves. At most limit instances are kept per host.
func (s *Store) UserHostHeldList(ctx context.Context, keys []AuthHost, limit int) ([]UserHostHeld, error) {
	out := make([]UserHostHeld, len(keys))
	var auths []string
	var hostIDs, heldIDs []int64
	for _, k := range keys {
		auths = append(auths, k.Auth)
		if k.HostID > 0 {
			hostIDs = append(hostIDs, k.HostID)
			if k.WantHeld {
				heldIDs = append(heldIDs, k.HostID)
			}
		}
	}
	users, err := selectIn[userTeamRow](ctx, s, "list users by authenticator", userListByAuth, auths)
	if err != nil {
		return nil, err
	}
	hosts, err := selectIn[hostQueuedRow](ctx, s, "list hosts by id", hostListByIDs, uniq(hostIDs))
	if err != nil {
		return nil, err
	}
	var held []heldRow
	var havs []row.HostAppVersion
	if len(heldIDs) > 0 {
		havs, err = selectIn[row.HostAppVersion](ctx, s, "list host_app_version of hosts", hostAppVersionListByHosts,
			uniq(heldIDs))
		if err != nil {
			return nil, err
		}
		q, args, err := sqlx.In(heldListByHosts, uniq(heldIDs), state.ServerInProgress)
		if err != nil {
			return nil, fmt.Errorf("list results in progress of %d hosts: %w", len(heldIDs), err)
		}
		if err := s.db.SelectContext(ctx, &held, q, args...); err != nil {
			return nil, fmt.Errorf("list results in progress of %d hosts: %w", len(heldIDs), err)
		}
	}
	hostByID := make(map[int64]hostQueuedRow, len(hosts))
	for _, h := range hosts {
		hostByID[h.ID] = h
	}
	heldByHost := map[int64][]HostResult{}
	for _, r := range held {
		if len(heldByHost[r.HostID]) < limit {
			heldByHost[r.HostID] = append(heldByHost[r.HostID], r.HostResult)
		}
	}
	havByHost := map[int64][]row.HostAppVersion{}
	for _, h := range havs {
		havByHost[h.HostID] = append(havByHost[h.HostID], h)
	}
	// Keyed by lower case, as the column's collation matches: the exact
	// comparison is the caller's, in constant time.
	userByKey := make(map[string]userTeamRow, len(users))
	for _, u := range users {
		userByKey[strings.ToLower(u.Authenticator)] = u
	}
	for i, k := range keys {
		var u userTeamRow
		u, out[i].UserFound = userByKey[strings.ToLower(k.Auth)]
		out[i].User, out[i].TeamName = u.User, u.TeamName
		if k.HostID > 0 {
			var h hostQueuedRow
			h, out[i].HostFound = hostByID[k.HostID]
			out[i].Host, out[i].TrickleDownQueued = h.Host, h.TrickleDownQueued
			if k.WantHeld {
				out[i].Held = heldByHost[k.HostID]
				if out[i].HostFound {
					out[i].HostAppVersions = havByHost[k.HostID]
				}
			}
		}
	}
	return out, nil
}
