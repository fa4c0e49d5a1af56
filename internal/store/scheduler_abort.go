package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// MaxResultNames bounds the names one ResultListByNames call looks up, so
// that a request listing thousands of tasks costs one bounded query.
const MaxResultNames = 1000

// ResultByName is what the scheduler needs to decide whether a task a host
// still holds is worth finishing: where the instance is, and whether its
// job is already done (a canonical result or an error mask).
type ResultByName struct {
	Name              string            `db:"name"`
	HostID            int64             `db:"hostid"`
	UserID            int64             `db:"userid"`
	ServerState       state.ServerState `db:"server_state"`
	Outcome           state.Outcome     `db:"outcome"`
	ReportDeadline    int64             `db:"report_deadline"`
	CanonicalResultID int64             `db:"canonical_resultid"`
	ErrorMask         state.ErrorMask   `db:"error_mask"`
}

const resultListByNames = `SELECT r.name, r.hostid, r.userid, r.server_state, r.outcome, r.report_deadline,
w.canonical_resultid, w.error_mask
FROM result r JOIN workunit w ON w.id = r.workunitid
WHERE r.name IN (?)`

// ResultListByNames returns the instances with the given names (index
// result_name), in no particular order; names that do not exist are
// skipped. More than MaxResultNames names is an error: the caller bounds
// what it asks.
func (s *Store) ResultListByNames(ctx context.Context, names []string) ([]ResultByName, error) {
	if len(names) > MaxResultNames {
		return nil, fmt.Errorf("list results by name: %d names, at most %d", len(names), MaxResultNames)
	}
	return selectIn[ResultByName](ctx, s, "list results by name", resultListByNames, names)
}
