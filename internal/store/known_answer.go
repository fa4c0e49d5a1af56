package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/taskserver/taskserver/internal/row"
)

const knownAnswerInsert = `INSERT INTO known_answer (create_time, appid, name, input, output)
VALUES (:create_time, :appid, :name, :input, :output)`

// KnownAnswerInsert adds a known-answer input with its expected output and
// returns its id. A name the app already uses is ErrDuplicate.
func (s *Store) KnownAnswerInsert(ctx context.Context, k row.KnownAnswer) (int64, error) {
	if k.Input == nil {
		k.Input = []byte{} // the column is NOT NULL; an empty input is allowed
	}
	if k.Output == nil {
		k.Output = []byte{}
	}
	id, err := s.insert(ctx, "known_answer", knownAnswerInsert, k)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return 0, fmt.Errorf("known answer %q: %w", k.Name, ErrDuplicate)
	}
	return id, err
}

const knownAnswerList = `SELECT id, create_time, appid, name FROM known_answer WHERE appid = ? ORDER BY id`

// KnownAnswerList returns app appID's known answers by id, without their
// input and output (which may be large).
func (s *Store) KnownAnswerList(ctx context.Context, appID int64) ([]row.KnownAnswer, error) {
	var out []row.KnownAnswer
	if err := s.db.SelectContext(ctx, &out, knownAnswerList, appID); err != nil {
		return nil, fmt.Errorf("list known answers of app %d: %w", appID, err)
	}
	return out, nil
}

const knownAnswerListInputs = `SELECT id, create_time, appid, name, input FROM known_answer WHERE id IN (?) ORDER BY id`

// KnownAnswerListInputs returns the known answers ids with their input but
// without their expected output, by id; ids that do not exist are left out.
func (s *Store) KnownAnswerListInputs(ctx context.Context, ids []int64) ([]row.KnownAnswer, error) {
	return selectIn[row.KnownAnswer](ctx, s, "list known-answer inputs", knownAnswerListInputs, ids)
}
