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

// StmtBatch is stmtBatch for the external tests.
type StmtBatch struct{ b *stmtBatch }

// NewStmtBatchForTest is newStmtBatch.
func NewStmtBatchForTest(ctx context.Context, tx *sqlx.Tx) StmtBatch {
	return StmtBatch{newStmtBatch(ctx, tx)}
}

// Add is stmtBatch.add.
func (s StmtBatch) Add(check int, query string, args ...any) { s.b.add(check, query, args...) }

// NewCheck is stmtBatch.newCheck.
func (s StmtBatch) NewCheck(want int) int { return s.b.newCheck(want) }

// Run is stmtBatch.run.
func (s StmtBatch) Run() error { return s.b.run() }

// ErrBatchCount is errBatchCount.
var ErrBatchCount = errBatchCount

// StmtBatchFlushBytes is stmtBatchFlushBytes.
const StmtBatchFlushBytes = stmtBatchFlushBytes

// UpdateRows adds a rowsUpdate of query, keyed by key, whose rows' values
// are named cols (the key's first).
func (s StmtBatch) UpdateRows(query string, key, cols []string, rows [][]any, want int) {
	s.b.updateRows(rowsUpdate{query: query, key: key, cols: cols}, rows, want)
}

// TriggerTargets is triggerTargets, which the external tests hold to the
// triggers of the schema.
var TriggerTargets = triggerTargets

// ReloadProblemForTest is reloadProblem, which serverCheck runs on a
// Galera node only.
func (s *Store) ReloadProblemForTest(ctx context.Context) (string, error) {
	return s.reloadProblem(ctx)
}
