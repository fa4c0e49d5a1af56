package boincimport

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Comparison is one table's figures in both databases.
type Comparison struct {
	Table                string
	OldRows, NewRows     int64
	OldCredit, NewCredit float64
	OldExpavg, NewExpavg float64
	Match                bool
}

// ErrMismatch is returned by Verify when the databases differ.
var ErrMismatch = errors.New("the databases differ")

// creditTolerance is the relative difference two credit sums may have: the
// same values summed in another order, after a trip through text.
const creditTolerance = 1e-9

// Verify compares the rows of platforms, apps and app versions, and the
// rows and credit sums (total and recent average) of users, hosts and
// teams, between the BOINC database and ours; ErrMismatch when any
// differ. Run it right after the import: our daemons grant credit and
// register hosts from then on.
func Verify(ctx context.Context, src Source, dst Target) ([]Comparison, error) {
	olds, err := src.ImportCounts(ctx)
	if err != nil {
		return nil, err
	}
	news, err := dst.ImportCounts(ctx)
	if err != nil {
		return nil, err
	}
	byTable := map[string]int{}
	for i, n := range news {
		byTable[n.Table] = i
	}
	var out []Comparison
	bad := false
	for _, o := range olds {
		n := news[byTable[o.Table]]
		c := Comparison{Table: o.Table, OldRows: o.Rows, NewRows: n.Rows, OldCredit: o.Credit, NewCredit: n.Credit,
			OldExpavg: o.Expavg, NewExpavg: n.Expavg}
		c.Match = o.Rows == n.Rows && near(o.Credit, n.Credit) && near(o.Expavg, n.Expavg)
		bad = bad || !c.Match
		out = append(out, c)
	}
	if bad {
		return out, ErrMismatch
	}
	return out, nil
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= creditTolerance*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// FormatComparisons writes the comparison as a table.
func FormatComparisons(cs []Comparison) string {
	s := fmt.Sprintf("%-12s %12s %12s %18s %18s %s\n", "table", "boinc rows", "our rows", "boinc credit", "our credit", "")
	for _, c := range cs {
		mark := "ok"
		if !c.Match {
			mark = "MISMATCH"
		}
		s += fmt.Sprintf("%-12s %12d %12d %18.2f %18.2f %s\n", c.Table, c.OldRows, c.NewRows, c.OldCredit, c.NewCredit, mark)
	}
	return s
}
