package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
)

// Teams, and who is in which: team rows, user.teamid and team.nusers.
// A membership change locks the user row, then the team rows in id order:
// the order in which the validator's and trickle handler's credit takes
// them (users, then teams), so the two never wait for each other in a
// cycle.

// ErrTeamClosed means a team takes no new members (joinable = 0).
var ErrTeamClosed = errors.New("team not joinable")

const teamColumns = `id, create_time, userid, name, name_lc, url, type, name_html, description, nusers, country,
total_credit, expavg_credit, expavg_time, joinable`

const teamInsert = `INSERT INTO team (create_time, userid, name, name_lc, url, type, name_html, description,
nusers, country, total_credit, expavg_credit, expavg_time, joinable)
VALUES (:create_time, :userid, :name, :name_lc, :url, :type, :name_html, :description,
0, :country, 0, 0, 0, :joinable)`

// TeamCreate adds team t with no members and no credit and returns its id
// (t.NameLC is made from t.Name when empty). A founder (t.UserID, not 0)
// joins it in the same transaction, leaving any team it was in, as BOINC's
// team creation does. A name already taken (the column's collation
// ignores case) is ErrDuplicate, a missing founder ErrNotFound; either
// way nothing is written.
func (s *Store) TeamCreate(ctx context.Context, t row.Team) (int64, error) {
	if t.NameLC == "" {
		t.NameLC = strings.ToLower(t.Name)
	}
	var id int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var old int64
		if t.UserID != 0 {
			// The founder first: every membership change locks the user
			// before the team.
			var err error
			if old, err = lockUserTeam(ctx, tx, t.UserID); err != nil {
				return err
			}
		}
		res, err := tx.NamedExecContext(ctx, teamInsert, t)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
		if t.UserID != 0 {
			err = setTeam(ctx, tx, t.UserID, old, id, true)
		}
		return err
	})
	if isDuplicate(err) {
		return 0, fmt.Errorf("create team %q: %w", t.Name, ErrDuplicate)
	}
	if err != nil {
		return 0, fmt.Errorf("create team %q: %w", t.Name, err)
	}
	return id, nil
}

// isDuplicate tells whether err is MySQL's ER_DUP_ENTRY.
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// TeamGet returns team id, or ErrNotFound.
func (s *Store) TeamGet(ctx context.Context, id int64) (row.Team, error) {
	var t row.Team
	err := s.db.GetContext(ctx, &t, `SELECT `+teamColumns+` FROM team WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("team %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("get team %d: %w", id, err)
	}
	return t, nil
}

const teamGetByName = `SELECT ` + teamColumns + ` FROM team WHERE name = ?`

// TeamGetByName returns the team called name, ignoring case as the
// column's collation (and BOINC's lookup) does, or ErrNotFound.
func (s *Store) TeamGetByName(ctx context.Context, name string) (row.Team, error) {
	var t row.Team
	err := s.db.GetContext(ctx, &t, teamGetByName, name)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("team %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("get team %q: %w", name, err)
	}
	return t, nil
}

const teamList = `SELECT ` + teamColumns + ` FROM team WHERE id > ? ORDER BY id LIMIT ?`

// TeamList returns up to limit teams with ids above afterID, in id order.
func (s *Store) TeamList(ctx context.Context, afterID int64, limit int) ([]row.Team, error) {
	var out []row.Team
	if err := s.db.SelectContext(ctx, &out, teamList, afterID, limit); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return out, nil
}

// UserSetTeam puts user userID in team teamID, or in none for 0, in one
// transaction: user.teamid changes and the nusers of the team left and
// the team joined follow. It returns the team the user was in. Joining the
// team the user is in changes nothing; a missing user or team is
// ErrNotFound and a team that takes no new members ErrTeamClosed, with
// nothing written. Credit stays where it was earned: the user's past
// credit neither joins the new team's nor leaves the old one's, as in
// BOINC.
func (s *Store) UserSetTeam(ctx context.Context, userID, teamID int64) (old int64, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if old, err = lockUserTeam(ctx, tx, userID); err != nil || old == teamID {
			return err
		}
		return setTeam(ctx, tx, userID, old, teamID, false)
	})
	if err != nil {
		return 0, fmt.Errorf("set team of user %d to %d: %w", userID, teamID, err)
	}
	return old, nil
}

const userLockTeam = `SELECT teamid FROM user WHERE id = ? FOR UPDATE`

// lockUserTeam locks user id's row and returns its team.
func lockUserTeam(ctx context.Context, tx *sqlx.Tx, id int64) (int64, error) {
	var teamID int64
	err := tx.GetContext(ctx, &teamID, userLockTeam, id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("user %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("lock user %d: %w", id, err)
	}
	return teamID, nil
}

const (
	teamLockJoinable = `SELECT id, joinable FROM team WHERE id IN (?, ?) ORDER BY id FOR UPDATE`
	userSetTeamID    = `UPDATE user SET teamid = ? WHERE id = ?`
	teamAddMember    = `UPDATE team SET nusers = nusers + 1 WHERE id = ?`
	// A count that an import or a hand edit left at 0 does not go below.
	teamRemoveMember = `UPDATE team SET nusers = GREATEST(nusers, 1) - 1 WHERE id = ?`
)

// setTeam moves user userID, whose row the transaction has locked and
// found in team old, to team teamID (0: none), another team. Unless
// closedOK (a founder joining the team it made), a team that takes no new
// members refuses.
func setTeam(ctx context.Context, tx *sqlx.Tx, userID, old, teamID int64, closedOK bool) error {
	var teams []struct {
		ID       int64 `db:"id"`
		Joinable bool  `db:"joinable"`
	}
	if err := tx.SelectContext(ctx, &teams, teamLockJoinable, old, teamID); err != nil {
		return fmt.Errorf("lock teams %d and %d: %w", old, teamID, err)
	}
	if teamID != 0 {
		found := false
		for _, t := range teams {
			if t.ID == teamID {
				found = true
				if !t.Joinable && !closedOK {
					return fmt.Errorf("team %d: %w", teamID, ErrTeamClosed)
				}
			}
		}
		if !found {
			return fmt.Errorf("team %d: %w", teamID, ErrNotFound)
		}
	}
	if _, err := tx.ExecContext(ctx, userSetTeamID, teamID, userID); err != nil {
		return fmt.Errorf("set teamid: %w", err)
	}
	if old != 0 {
		// A team that no longer exists changes no row.
		if _, err := tx.ExecContext(ctx, teamRemoveMember, old); err != nil {
			return fmt.Errorf("count team %d's members: %w", old, err)
		}
	}
	if teamID != 0 {
		if _, err := tx.ExecContext(ctx, teamAddMember, teamID); err != nil {
			return fmt.Errorf("count team %d's members: %w", teamID, err)
		}
	}
	return nil
}

const userListTeamByIDs = `SELECT id, teamid FROM user WHERE id IN (?) AND teamid <> 0`

// creditTeams adds the credit granted to users, in a transaction that has
// already credited (and so locked) their rows, to the teams they are in,
// with the same decay rule: BOINC's grant_credit does the same for each
// job. Holding the user rows, the teams read are the ones the users are in
// when the transaction commits (a join or leave waits for it). The teams
// are written last, in id order, after every user and host.
func creditTeams(ctx context.Context, tx *sqlx.Tx, now int64, users []creditChange) error {
	if len(users) == 0 {
		return nil
	}
	byUser := make(map[int64]float64, len(users))
	ids := make([]int64, 0, len(users))
	for _, u := range users {
		byUser[u.id] += u.credit
		ids = append(ids, u.id)
	}
	teamCredit := map[int64]float64{}
	for chunk := range slices.Chunk(ids, validateChunk) {
		q, args, err := sqlx.In(userListTeamByIDs, chunk)
		if err != nil {
			return err
		}
		var members []struct {
			ID     int64 `db:"id"`
			TeamID int64 `db:"teamid"`
		}
		if err := tx.SelectContext(ctx, &members, q, args...); err != nil {
			return fmt.Errorf("read users' teams: %w", err)
		}
		for _, m := range members {
			teamCredit[m.TeamID] += byUser[m.ID]
		}
	}
	var teams []creditChange
	for _, id := range sortedKeys(teamCredit) {
		if c := teamCredit[id]; c != 0 {
			teams = append(teams, creditChange{id: id, credit: c})
		}
	}
	for chunk := range slices.Chunk(teams, validateChunk) {
		if err := updateCredit(ctx, tx, "team", now, chunk); err != nil {
			return err
		}
	}
	return nil
}
