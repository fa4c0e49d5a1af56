package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// ErrSharedFileGone is returned when a job refers to a shared file that is
// being deleted or was deleted: stage it again.
var ErrSharedFileGone = errors.New("shared file is being deleted or was deleted; stage it again")

const sharedFileColumns = `id, create_time, name, md5, nbytes, gzipped_nbytes, state, last_ref_time, njobs`

// A file staged again after it was deleted is live again (it is on disk
// once more); one being deleted is refused, since the delete pass may
// remove the file just written.
const sharedFileRegister = `INSERT INTO shared_file (create_time, name, md5, nbytes, gzipped_nbytes, state, last_ref_time)
VALUES (?, ?, ?, ?, ?, 0, ?)
ON DUPLICATE KEY UPDATE
  gzipped_nbytes = IF(state = 1, gzipped_nbytes, GREATEST(gzipped_nbytes, VALUES(gzipped_nbytes))),
  last_ref_time = IF(state = 1, last_ref_time, GREATEST(last_ref_time, VALUES(last_ref_time))),
  state = IF(state = 2, 0, state)`

// SharedFileRegister records a shared file just staged (its content is on
// disk under f.Name) and returns the stored row. Staging the same file again
// is harmless: the name is content-addressed. A file in the middle of
// being deleted is ErrSharedFileGone.
func (s *Store) SharedFileRegister(ctx context.Context, f row.SharedFile) (row.SharedFile, error) {
	if _, err := s.db.ExecContext(ctx, sharedFileRegister, f.CreateTime, f.Name, f.MD5, f.Nbytes, f.GzippedNbytes, f.LastRefTime); err != nil {
		return row.SharedFile{}, fmt.Errorf("register shared file %q: %w", f.Name, err)
	}
	got, err := s.SharedFileGet(ctx, f.Name)
	if err != nil {
		return got, err
	}
	if got.MD5 != f.MD5 {
		return got, fmt.Errorf("register shared file %q: stored with md5 %s, staged with %s", f.Name, got.MD5, f.MD5)
	}
	if got.State != row.SharedFileLive {
		return got, fmt.Errorf("shared file %q: %w", f.Name, ErrSharedFileGone)
	}
	return got, nil
}

// SharedFileGet returns the shared file called name (its physical name),
// or ErrNotFound.
func (s *Store) SharedFileGet(ctx context.Context, name string) (row.SharedFile, error) {
	var f row.SharedFile
	err := s.db.GetContext(ctx, &f, `SELECT `+sharedFileColumns+` FROM shared_file WHERE name = ?`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return f, fmt.Errorf("shared file %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("get shared file %q: %w", name, err)
	}
	return f, nil
}

// SharedFileLatest returns the live shared file staged last under the
// logical name prefix (physical names are "<prefix>_<md5>"), or
// ErrNotFound.
func (s *Store) SharedFileLatest(ctx context.Context, prefix string) (row.SharedFile, error) {
	var f row.SharedFile
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + `\_%`
	err := s.db.GetContext(ctx, &f, `SELECT `+sharedFileColumns+` FROM shared_file
WHERE name LIKE ? AND CHAR_LENGTH(name) = ? AND state = 0 ORDER BY id DESC LIMIT 1`, like, len([]rune(prefix))+33)
	if errors.Is(err, sql.ErrNoRows) {
		return f, fmt.Errorf("shared file %q: %w", prefix, ErrNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("get shared file %q: %w", prefix, err)
	}
	return f, nil
}

// SharedFileList returns the shared files by id, deleted ones too.
func (s *Store) SharedFileList(ctx context.Context) ([]row.SharedFile, error) {
	var out []row.SharedFile
	if err := s.db.SelectContext(ctx, &out, `SELECT `+sharedFileColumns+` FROM shared_file ORDER BY id`); err != nil {
		return nil, fmt.Errorf("list shared files: %w", err)
	}
	return out, nil
}

// SharedRefs are the shared files new jobs use: shared_file ids by job
// name.
type SharedRefs map[string][]int64

const (
	sharedRefInsert = `INSERT INTO workunit_shared_file (shared_file_id, workunitid) VALUES `
	sharedRefTuple  = `(?, ?)`
)

// insertSharedRefs records, in the transaction that inserted wus, which
// shared files each job uses, and marks each file referred to now: only a
// live file can be referred to (a file being deleted fails the whole
// insert with ErrSharedFileGone). The update always changes the row (njobs),
// so it conflicts with a concurrent delete pass instead of passing it by.
func insertSharedRefs(ctx context.Context, tx *sqlx.Tx, refs SharedRefs, now int64) error {
	uses := map[int64]int{}
	var names []string
	for name, ids := range refs {
		if len(ids) > 0 {
			names = append(names, name)
			for _, id := range ids {
				uses[id]++
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	ids := slices.Sorted(func(yield func(int64) bool) {
		for id := range uses {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range ids { // in id order, so two inserts never deadlock
		res, err := tx.ExecContext(ctx, `UPDATE shared_file SET njobs = njobs + ?, last_ref_time = GREATEST(last_ref_time, ?)
WHERE id = ? AND state = 0`, uses[id], now, id)
		if err != nil {
			return fmt.Errorf("refer to shared file %d: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("shared file %d: %w", id, ErrSharedFileGone)
		}
	}
	q, args, err := sqlx.In(`SELECT id, name FROM workunit WHERE name IN (?)`, names)
	if err != nil {
		return err
	}
	var got []struct {
		ID   int64  `db:"id"`
		Name string `db:"name"`
	}
	if err := tx.SelectContext(ctx, &got, q, args...); err != nil {
		return fmt.Errorf("read new job ids: %w", err)
	}
	idOf := make(map[string]int64, len(got))
	for _, g := range got {
		idOf[g.Name] = g.ID
	}
	var refArgs []any
	for _, name := range names {
		for _, id := range slices.Compact(slices.Sorted(slices.Values(refs[name]))) {
			refArgs = append(refArgs, id, idOf[name])
		}
	}
	if _, err := tx.ExecContext(ctx, sharedRefInsert+transValues(sharedRefTuple, len(refArgs)/2), refArgs...); err != nil {
		return fmt.Errorf("record shared file references: %w", err)
	}
	return nil
}

// SharedFileDeleteParams picks the shared files a delete pass takes.
type SharedFileDeleteParams struct {
	// RefBefore: only files no job referred to (nor stage touched) at or
	// after this Unix time: a file staged for jobs not submitted yet is
	// kept for the grace.
	RefBefore int64
	// Mod and ModIndex pick this replica's rows: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows taken.
	Limit int
}

// sharedFileMarkDeleting takes live shared files that no job still needing
// its files refers to. It is one statement, so a job that refers to the
// file at the same time either committed first (its reference raised
// last_ref_time, and the row no longer qualifies: InnoDB re-reads a row it
// waited for) or comes after (its own update, WHERE state = 0, changes no
// row and its insert fails with ErrSharedFileGone).
var sharedFileMarkDeleting = `UPDATE shared_file SET state = 1
WHERE state = 0 AND last_ref_time < ? AND ` + partitionFilter("id") + `
AND NOT EXISTS (SELECT 1 FROM workunit_shared_file wsf JOIN workunit w ON w.id = wsf.workunitid
	WHERE wsf.shared_file_id = shared_file.id AND w.file_delete_state <> ?)
ORDER BY id LIMIT ?`

// SharedFileMarkDeleting moves up to p.Limit shared files from live to
// being deleted (state 0 → 1): those last referred to before p.RefBefore
// that no job whose files are still needed (file_delete_state not DONE)
// refers to. It returns how many it moved. From then on no new job may
// refer to them (see insertSharedRefs) and staging them again is refused
// until they are deleted.
func (s *Store) SharedFileMarkDeleting(ctx context.Context, p SharedFileDeleteParams) (int64, error) {
	n, err := s.exec(ctx, sharedFileMarkDeleting, p.RefBefore, p.Mod, p.ModIndex, int(state.FileDeleteDone), p.Limit)
	if err != nil {
		return 0, fmt.Errorf("mark unused shared files for deletion: %w", err)
	}
	return n, nil
}

// SharedFileListDeleting returns up to p.Limit shared files being deleted
// (state 1), by id: those SharedFileMarkDeleting just moved, and those of
// a pass that stopped before marking them deleted. p.RefBefore is unused.
func (s *Store) SharedFileListDeleting(ctx context.Context, p SharedFileDeleteParams) ([]row.SharedFile, error) {
	var out []row.SharedFile
	if err := s.db.SelectContext(ctx, &out, `SELECT `+sharedFileColumns+` FROM shared_file
WHERE state = 1 AND `+partitionFilter("id")+` ORDER BY id LIMIT ?`, p.Mod, p.ModIndex, p.Limit); err != nil {
		return nil, fmt.Errorf("list shared files being deleted: %w", err)
	}
	return out, nil
}

// SharedFileMarkDeleted moves the shared files ids that are being deleted
// to deleted (state 1 → 2), once their files are gone, and returns how
// many it moved.
func (s *Store) SharedFileMarkDeleted(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	q, args, err := sqlx.In(`UPDATE shared_file SET state = 2 WHERE id IN (?) AND state = 1`, ids)
	if err != nil {
		return 0, err
	}
	n, err := s.exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("mark %d shared files deleted: %w", len(ids), err)
	}
	return n, nil
}
