package store

import (
	"strings"
	"testing"
)

// TestStatementFormNamesAStatementWhateverItsBatch checks that the digests
// of one multi-row statement at different batch sizes, and one the server
// cut inside its CASE arms, give one form, and that forms stay apart.
func TestStatementFormNamesAStatementWhateverItsBatch(t *testing.T) {
	arms := func(n int) string { return strings.Repeat("WHEN ? THEN ? ", n) }
	two := "UPDATE `result` `r` SET `r` . `hostid` = CASE `r` . `id` " + arms(2) + "END , `r` . `server_state` = ? WHERE `r` . `id` IN (...)"
	many := "UPDATE `result` `r` SET `r` . `hostid` = CASE `r` . `id` " + arms(40) + "END , `r` . `server_state` = ? WHERE `r` . `id` IN (...)"
	cut := ("UPDATE `result` `r` SET `r` . `hostid` = CASE `r` . `id` " + arms(200))[:1024]
	want := "UPDATE `result` `r` SET `r` . `hostid` = CASE `r` . `id` WHEN ..."
	for _, d := range []string{two, many, cut} {
		if got := statementForm(d); got != want {
			t.Errorf("statementForm(%.80q…) = %q, want %q", d, got, want)
		}
	}
	if got := statementForm("SELECT `v` FROM `t` WHERE ID IN (?)"); got != "SELECT `v` FROM `t` WHERE ID IN (...)" {
		t.Errorf("a one-value list: %q", got)
	}
	long := "SELECT " + strings.Repeat("`a_column` , ", 40) + "`b` FROM `t`"
	if got := statementForm(long); len(got) != statementFormLen+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("a long text: %d bytes, %q", len(got), got)
	}

	folded := foldStatements([]ScaleStatement{
		{Text: two, Count: 2, TimeMS: 1.5, RowsAffected: 4},
		{Text: "COMMIT ", Count: 9, TimeMS: 2},
		{Text: many, Count: 1, TimeMS: 1, RowsAffected: 40},
		{Text: "TRUNCATE `performance_schema` . `events_statements_summary_by_digest`", Count: 1, TimeMS: 9},
		{Text: "DO ?", Count: 1, TimeMS: 0.1},
	}, 2)
	if len(folded) != 2 || folded[0].Text != want || folded[0].Count != 3 || folded[0].TimeMS != 2.5 ||
		folded[0].RowsAffected != 44 || folded[1].Text != "COMMIT" {
		t.Errorf("foldStatements = %+v, want the update's two sizes as one form first, then COMMIT, and no more", folded)
	}
}
