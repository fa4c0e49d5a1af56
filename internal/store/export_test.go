package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// InTxForTest is inTx for the package's external tests: a deadlock needs
// two transactions that the test interleaves statement by statement.
func (s *Store) InTxForTest(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTx(ctx, fn)
}
