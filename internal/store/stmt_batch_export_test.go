package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// StmtBatchExec runs queries, each with its args, as one stmtBatch (one
// round trip) in a transaction of s: the changed rows of the statements
// whose checks entry is i >= 0 must add up to wants[i].
func StmtBatchExec(ctx context.Context, s *Store, queries []string, args [][]any, checks, wants []int) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		m := stmtBatch{wants: wants}
		for i, q := range queries {
			m.queue(q, args[i], checks[i])
		}
		return m.exec(ctx, tx)
	})
}

// ErrBatchCount is errBatchCount, for tests.
var ErrBatchCount = errBatchCount
