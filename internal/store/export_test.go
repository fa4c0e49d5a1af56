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

// PartitionFilter exposes the SQL form of the --mod rule to the external
// tests, which hold it to Partition on the server itself.
var PartitionFilter = partitionFilter
