package projectrun

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// Querier runs read-only queries: a *sql.DB, or the *sqlx.DB of
// store.Store.DB.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Counts are the rows live in a project's database.
type Counts struct {
	Jobs          int // workunit rows
	Unassimilated int // jobs not yet assimilated (state.AssimilateDone)
	NeedValidate  int // jobs flagged for the validator
	Instances     int // result rows
	Unsent        int
	InProgress    int
	Over          int
}

// NotOver is the instances not over yet.
func (c Counts) NotOver() int { return c.Instances - c.Over }

// CountLive counts the live rows in two queries, cheap enough to ask
// every second however long a run (the archives, which grow with it, are
// not read).
func CountLive(ctx context.Context, db Querier) (Counts, error) {
	var c Counts
	err := db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(assimilate_state <> ?), 0), COALESCE(SUM(need_validate <> 0), 0) FROM workunit`,
		state.AssimilateDone).Scan(&c.Jobs, &c.Unassimilated, &c.NeedValidate)
	if err != nil {
		return c, fmt.Errorf("count jobs: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT server_state, COUNT(*) FROM result GROUP BY server_state`)
	if err != nil {
		return c, fmt.Errorf("count instances: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st state.ServerState
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return c, fmt.Errorf("count instances: %w", err)
		}
		c.Instances += n
		switch st {
		case state.ServerUnsent:
			c.Unsent = n
		case state.ServerInProgress:
			c.InProgress = n
		case state.ServerOver:
			c.Over = n
		}
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("count instances: %w", err)
	}
	return c, nil
}

// SharedFilesKept names the files of the download directory that belong
// to live shared files (each, and its gzip'd copy if it has one): files the
// file deleter keeps for --shared-file-grace after their last job, so no
// leftover of finished jobs.
func SharedFilesKept(ctx context.Context, db Querier) (map[string]bool, error) {
	shared, err := LiveRecords(ctx, db, "shared_file", []string{"name", "state", "gzipped_nbytes"})
	if err != nil {
		return nil, fmt.Errorf("read shared files: %w", err)
	}
	kept := map[string]bool{}
	for _, f := range shared {
		if f.Int("state") == int64(row.SharedFileLive) {
			kept[f["name"]] = true
			if f.Float("gzipped_nbytes") > 0 {
				kept[f["name"]+".gz"] = true
			}
		}
	}
	return kept, nil
}

// Unkept is left (paths ListLeft gives) without the files kept (by base
// name; see SharedFilesKept).
func Unkept(left []string, kept map[string]bool) []string {
	var out []string
	for _, l := range left {
		if !kept[filepath.Base(l)] {
			out = append(out, l)
		}
	}
	return out
}
