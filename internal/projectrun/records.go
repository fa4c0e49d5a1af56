package projectrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/dbpurge"
)

// Record is one workunit or result row, archived or live, by column name,
// so that the checks read purged and live rows alike.
type Record map[string]string

// Int is the column's value as an integer; 0 when empty.
func (r Record) Int(col string) int64 { return int64(r.Float(col)) }

// Float is the column's value as a number; 0 when empty.
func (r Record) Float(col string) float64 {
	v, _ := strconv.ParseFloat(strings.TrimSpace(r[col]), 64)
	return v
}

// ReadArchives reads every archive file db_purge wrote in dir, oldest
// first. Lenient reading (progress lines, while db_purge appends) keeps
// what is readable and passes over the rest.
func ReadArchives(dir string, lenient bool) (wus, results []Record, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.xml.gz"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	for _, path := range files {
		w, r, err := readArchive(path)
		if err != nil && !lenient {
			return nil, nil, fmt.Errorf("archive %s: %w", filepath.Base(path), err)
		}
		wus = append(wus, w...)
		results = append(results, r...)
	}
	return wus, results, nil
}

// readArchive reads one archive file; on an error, with what it read.
func readArchive(path string) (wus, results []Record, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	recs, err := dbpurge.ReadArchive(f)
	for _, r := range recs {
		switch r.Table {
		case "workunit":
			wus = append(wus, Record(r.Columns))
		case "result":
			results = append(results, Record(r.Columns))
		}
	}
	return wus, results, err
}

// LiveRecords reads cols of every row of table in the archives' shape.
func LiveRecords(ctx context.Context, db Querier, table string, cols []string) ([]Record, error) {
	rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var out []Record
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		r := make(Record, len(cols))
		for i, c := range cols {
			switch v := vals[i].(type) {
			case []byte:
				r[c] = string(v)
			case nil:
				r[c] = ""
			default:
				r[c] = fmt.Sprint(v)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return out, nil
}
