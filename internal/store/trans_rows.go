package store

import "strings"

// Multi-row statements. One statement carrying many rows costs the server one
// parse, one round trip and one pass over its indexes' pages instead of one
// of each per row; the creation and transition paths build theirs here.

// maxRowsPerStatement bounds the rows of one multi-row statement, which keeps
// it far below max_allowed_packet (a result row with its xml_doc_in is well
// under 1 KiB) and the server's parse and lock bookkeeping small.
const maxRowsPerStatement = 500

// transValues returns n copies of tuple, such as "(?, ?)", joined by commas:
// the VALUES part of a multi-row INSERT.
func transValues(tuple string, n int) string {
	var sb strings.Builder
	sb.Grow(n * (len(tuple) + 1))
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(tuple)
	}
	return sb.String()
}

// transChunks calls fn with [lo, hi) bounds covering n items, at most
// maxRowsPerStatement at a time, and stops at the first error.
func transChunks(n int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += maxRowsPerStatement {
		if err := fn(lo, min(n, lo+maxRowsPerStatement)); err != nil {
			return err
		}
	}
	return nil
}
