package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// MaxReportedNames bounds the names one ResultListReported call looks up:
// the scheduler reads at most 2000 reports of a request.
const MaxReportedNames = 2000

// ReportedResult is what the scheduler needs to decide a report of an
// instance: whose it is, its state, and its output files.
type ReportedResult struct {
	ID              int64                 `db:"id"`
	Name            string                `db:"name"`
	WorkunitID      int64                 `db:"workunitid"`
	HostID          int64                 `db:"hostid"`
	UserID          int64                 `db:"userid"`
	ServerState     state.ServerState     `db:"server_state"`
	Outcome         state.Outcome         `db:"outcome"`
	SentTime        int64                 `db:"sent_time"`
	XMLDocIn        string                `db:"xml_doc_in"`
	FileDeleteState state.FileDeleteState `db:"file_delete_state"`
}

const resultListReported = `SELECT id, name, workunitid, hostid, userid, server_state, outcome, sent_time,
COALESCE(xml_doc_in, '') AS xml_doc_in, file_delete_state
FROM result WHERE name IN (?)`

// ResultListReported returns the instances with the given names (index
// result_name), in one statement, in no particular order; names that do not
// exist are skipped. More than MaxReportedNames names is an error: the
// caller bounds what it asks.
func (s *Store) ResultListReported(ctx context.Context, names []string) ([]ReportedResult, error) {
	if len(names) > MaxReportedNames {
		return nil, fmt.Errorf("list reported results: %d names, at most %d", len(names), MaxReportedNames)
	}
	return selectIn[ReportedResult](ctx, s, "list reported results", resultListReported, names)
}
