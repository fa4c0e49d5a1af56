package store

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

// INSERT IGNORE: the same template stored twice (two submitters at once) is
// one row; the unique key on (kind, md5) decides, on a cluster too.
const jobTemplateInsert = `INSERT IGNORE INTO job_template (create_time, kind, md5, body) VALUES (?, ?, ?, ?)`

const jobTemplateGetByContent = `SELECT id, create_time, kind, md5, body FROM job_template WHERE kind = ? AND md5 = ?`

// JobTemplatePut stores a template of kind ("input" or "output") unless a
// template with the same content is stored already, and returns its id.
// The caller checks the template first; rows are never changed.
func (s *Store) JobTemplatePut(ctx context.Context, kind, body string, now int64) (int64, error) {
	sum := md5.Sum([]byte(body))
	digest := hex.EncodeToString(sum[:])
	if _, err := s.db.ExecContext(ctx, jobTemplateInsert, now, kind, digest, body); err != nil {
		return 0, fmt.Errorf("store %s template: %w", kind, err)
	}
	var t row.JobTemplate
	if err := s.db.GetContext(ctx, &t, jobTemplateGetByContent, kind, digest); err != nil {
		return 0, fmt.Errorf("store %s template: read back: %w", kind, err)
	}
	if t.Body != body {
		// Two bodies with one md5: refuse rather than run another's jobs.
		return 0, fmt.Errorf("store %s template: md5 %s already names another template", kind, digest)
	}
	return t.ID, nil
}

const jobTemplateGet = `SELECT id, create_time, kind, md5, body FROM job_template WHERE id = ?`

// JobTemplateGet returns template id, or ErrNotFound.
func (s *Store) JobTemplateGet(ctx context.Context, id int64) (row.JobTemplate, error) {
	var t row.JobTemplate
	err := s.db.GetContext(ctx, &t, jobTemplateGet, id)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("job template %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("get job template %d: %w", id, err)
	}
	return t, nil
}
