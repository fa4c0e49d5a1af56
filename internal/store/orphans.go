package store

import "context"

// resultNamesExisting uses the unique key result_name: one index probe per
// name, whatever the size of the table.
const resultNamesExisting = `SELECT name FROM result WHERE name IN (?)`

// ResultNamesExisting returns those of names that are the name of a result
// row, in any state, each once. The file deleter's orphan sweep asks it
// which uploaded files a result may still need.
//
// The column's collation may be case- or accent-insensitive, so the query
// can return rows whose names only collate equal to one asked for; those
// are left out, because the data server and the file deleter name files by
// the exact bytes of the result's name.
func (s *Store) ResultNamesExisting(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var found []string
	err := s.withRetry(ctx, func() error {
		var err error
		found, err = selectIn[string](ctx, s, "look up result names", resultNamesExisting, names)
		return err
	})
	if err != nil {
		return nil, err
	}
	asked := make(map[string]bool, len(names))
	for _, n := range names {
		asked[n] = true
	}
	out := found[:0]
	for _, n := range found {
		if asked[n] {
			out = append(out, n)
			asked[n] = false // each once, even if asked twice
		}
	}
	return out, nil
}
