package store

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlWord marks a string literal as a piece of SQL.
var sqlWord = regexp.MustCompile(`(?i)\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|WHERE|VALUES|FROM|JOIN|SET|COALESCE|UNION|ORDER BY|LIMIT|IN)\b|\?`)

// sqlFragments are the non-literal operands allowed in SQL built by
// concatenation or fmt.Sprintf in this package, each a fixed fragment
// (never a value from a caller, a client or the database): column lists
// built from struct tags or constant names, placeholder lists ("?, ?, ?")
// sized by argument counts, table and column names chosen from constant
// sets. Every value goes in a ? placeholder. An operand that is not listed
// fails the test: look at where it comes from, and add it here with the
// reason only if it is such a fragment.
var sqlFragments = map[string]string{
	"accounts.go: userColumns":                                    "constant column list",
	"batch.go: WorkunitColumns":                                   "constant column list",
	"db_purge.go: workunitColumnsW":                               "constant column list",
	"db_purge.go: ResultColumns":                                  "constant column list",
	"host_cpid.go: hostSelect":                                    "constant column list (hostColumns with one COALESCE)",
	"user.go: hostSelect":                                         "constant column list (hostColumns with one COALESCE)",
	"sched_auth.go: hostSelect":                                   "constant column list (hostColumns with one COALESCE)",
	"sched_auth.go: c":                                            "a name from the constant hostColumns",
	"sched_auth.go: zero":                                         "the literal 0 or ''",
	"sched_auth.go: prefixed(\"u.\", userColumns)":                "constant column list, prefixed",
	"sched_auth.go: userHostColumns":                              "built once from hostColumns",
	"sched_auth.go: havJSON":                                      "constant scalar subquery with a ? placeholder",
	"sched_batch.go: WorkunitColumns":                             "constant column list",
	"sched_batch.go: ResultColumns":                               "constant column list",
	"stmt_batch.go: strings.Repeat(\"?, \", width-1)":             "placeholders",
	"stmt_batch.go: u.key[0]":                                     "a rowsUpdate's key column: constant SQL from its declaration",
	"stmt_batch.go: c":                                            "a rowsUpdate's key column: constant SQL from its declaration",
	"stmt_batch.go: strings.Repeat(\"?, \", len(rows)-1)":         "placeholders",
	"scheduler.go: ResultColumns":                                 "constant column list",
	"scheduler.go: WorkunitColumns":                               "constant column list",
	"taskctl.go: platformColumns":                                 "constant column list",
	"trans_batch.go: transValues(resultInsertNewTuple, hi-lo)":    "the constant placeholder tuple repeated",
	"trans_batch.go: stateInProgress":                             "a state as an SQL literal (sched_batch.go, checked by TestSchedBatchStateLiterals)",
	"trans_batch.go: noTransition":                                "a state as an SQL literal (sched_batch.go, checked by TestSchedBatchStateLiterals)",
	"valid_batch.go: assimilateReady":                             "a state as an SQL literal (sched_batch.go, checked by TestSchedBatchStateLiterals)",
	"valid_batch.go: validateInit":                                "a state as an SQL literal (sched_batch.go, checked by TestSchedBatchStateLiterals)",
	"valid_batch.go: validateInconclusive":                        "a state as an SQL literal (sched_batch.go, checked by TestSchedBatchStateLiterals)",
	"work_generator.go: transValues(workunitInsertTuple, hi-lo)":  "the constant placeholder tuple repeated",
	"shared_file.go: transValues(sharedRefTuple, len(refArgs)/2)": "the constant placeholder tuple repeated",
	"user_admin.go: userColumns":                                  "constant column list",
	"valid_batch.go: in":                                          "placeholders (validPlaceholders)",
	"valid_batch.go: gain.String()":                               "\" WHEN ? THEN ?\" repeated",
	"valid_batch.go: table":                                       "updateCredit is called with the constants \"user\" and \"host\"",
	"valid_batch.go: strings.Join(sets, \", \")":                  "SET clauses built from literals and placeholders above",
	"valid_batch.go: validPlaceholders(len(all))":                 "placeholders",
	"boinc_import.go: t.source":                                   "the SELECT list of one of the constant ImportTables (unexported: only this package makes them)",
	"boinc_import.go: t.Name":                                     "the table name of one of the constant ImportTables",
	"boinc_import.go: strings.Join(t.columns, \", \")":            "the column names of one of the constant ImportTables",
	"boinc_import.go: ident":                                      "importIdentity's constant column for the table",
	"boinc_import.go: table":                                      "ImportIdentities: a table name found among importIdentity's constant keys first",
	"boinc_import.go: cols":                                       "multiInsert is called with constant column lists",
	"boinc_import.go: strings.TrimSuffix(strings.Repeat(one+\",\", len(rows)), \",\")": "placeholders",
	"boinc_import.go: strings.TrimSuffix(strings.Repeat(one+\",\", n), \",\")":         "placeholders",
	"scalefill.go: seqTable(n)":                    "the sequence engine's table seq_0_to_<n-1>, made from an integer",
	"valid_batch.go: strings.Repeat(\"?, \", n-1)": "placeholders",
	"work_generator.go: WorkunitColumns":           "constant column list",
	"assim_batch.go: partitionFilter(\"w.id\")":    "the --mod partition rule (partition.go) on a literal id column",
	"db_purge.go: partitionFilter(\"w.id\")":       "the --mod partition rule (partition.go) on a literal id column",
	"feeder.go: partitionFilter(\"r.id\")":         "the --mod partition rule (partition.go) on a literal id column",
	"file_deleter.go: partitionFilter(\"id\")":     "the --mod partition rule (partition.go) on a literal id column",
	"shared_file.go: partitionFilter(\"id\")":      "the --mod partition rule (partition.go) on a literal id column",
	"transitioner.go: partitionFilter(\"w.id\")":   "the --mod partition rule (partition.go) on a literal id column",
	"transitioner.go: partitionFilter(\"id\")":     "the --mod partition rule (partition.go) on a literal id column",
	"trickle.go: partitionFilter(\"id\")":          "the --mod partition rule (partition.go) on a literal id column",
	"valid_list.go: partitionFilter(\"w.id\")":     "the --mod partition rule (partition.go) on a literal id column",
	"partition.go: col":                            "partitionFilter is called only with a literal id column name",
	"valid_list.go: workunitListValidateFrom":      "the FROM … LIMIT of the validator's enumeration, literals and the partition rule",
}

// TestSQLIsParameterised parses the package's sources and fails on any SQL
// put together (with +, fmt.Sprintf, or a query method given a Sprintf of a
// variable format) with an operand that is not a literal, a constant or a
// listed fixed fragment. It does not follow strings.Builder writes of a
// lone variable; the builders here write literals and "?" only.
func TestSQLIsParameterised(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var checked int
	parsed := map[string]*ast.File{}
	// sqlConsts are the package's constants holding SQL: a value added to
	// one is SQL built with a value, as much as one added to a literal.
	sqlConsts := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[name] = f
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) && constHasSQL(vs.Values[i]) {
							sqlConsts[n.Name] = true
						}
					}
				}
			}
		}
	}
	for _, name := range files {
		f, ok := parsed[name]
		if !ok {
			continue
		}
		consts := map[string]bool{}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						consts[n.Name] = true
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var operands []ast.Expr
			switch e := n.(type) {
			case *ast.BinaryExpr:
				if e.Op != token.ADD {
					return true
				}
				operands = flatten(e)
			case *ast.CallExpr:
				sel, ok := e.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if dbMethods[sel.Sel.Name] {
					// A query made by Sprintf from a format that is not a
					// literal: all of the call's operands are checked.
					for _, a := range e.Args {
						if c, ok := a.(*ast.CallExpr); ok {
							if fs, ok := c.Fun.(*ast.SelectorExpr); ok && isIdent(fs.X, "fmt") && fs.Sel.Name == "Sprintf" && !hasSQL(c.Args[:1], sqlConsts) {
								check(fset, name, consts, seen, t, c.Args)
								checked++
							}
						}
					}
					return true
				}
				if !isIdent(sel.X, "fmt") || (sel.Sel.Name != "Sprintf" && sel.Sel.Name != "Fprintf") {
					return true
				}
				operands = e.Args
				if sel.Sel.Name == "Fprintf" {
					operands = operands[1:]
				}
			default:
				return true
			}
			if !hasSQL(operands, sqlConsts) {
				return true
			}
			checked++
			check(fset, name, consts, seen, t, operands)
			// Nested concatenations were checked as one.
			return false
		})
	}
	if checked < 10 {
		t.Fatalf("checked %d SQL constructions; the scan is not finding the package's SQL", checked)
	}
	for k := range sqlFragments {
		if !seen[k] {
			t.Errorf("allow-listed SQL fragment %q no longer occurs: remove it", k)
		}
	}
}

// dbMethods are the sqlx and database/sql methods that take a query.
var dbMethods = map[string]bool{"ExecContext": true, "QueryContext": true, "QueryxContext": true, "QueryRowContext": true,
	"QueryRowxContext": true, "GetContext": true, "SelectContext": true, "PrepareContext": true, "PreparexContext": true,
	"NamedExecContext": true, "Exec": true, "Query": true, "Get": true, "Select": true,
	// stmtBatch.add: a statement of a multi-statement write.
	"add": true}

// check reports the operands of one SQL construction that are neither
// literals, constants of the file, nor listed fragments.
func check(fset *token.FileSet, file string, consts, seen map[string]bool, t *testing.T, operands []ast.Expr) {
	t.Helper()
	for _, op := range operands {
		if _, ok := op.(*ast.BasicLit); ok {
			continue
		}
		if id, ok := op.(*ast.Ident); ok && consts[id.Name] {
			continue
		}
		src := exprString(fset, op)
		key := file + ": " + src
		if _, ok := sqlFragments[key]; ok {
			seen[key] = true
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		t.Errorf("%s: SQL built with %s, which is neither a literal nor a listed fixed fragment (use a ? placeholder)", fset.Position(op.Pos()), src)
	}
}

func flatten(e ast.Expr) []ast.Expr {
	if p, ok := e.(*ast.ParenExpr); ok {
		return flatten(p.X)
	}
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
		return append(flatten(b.X), flatten(b.Y)...)
	}
	return []ast.Expr{e}
}

// hasSQL reports whether an operand is a string literal holding SQL or
// names one of sqlConsts.
func hasSQL(operands []ast.Expr, sqlConsts map[string]bool) bool {
	for _, op := range operands {
		switch e := op.(type) {
		case *ast.BasicLit:
			if isSQLLit(e) {
				return true
			}
		case *ast.Ident:
			if sqlConsts[e.Name] {
				return true
			}
		}
	}
	return false
}

// constHasSQL reports whether a constant's value holds a string literal
// with SQL in it.
func constHasSQL(value ast.Expr) bool {
	found := false
	ast.Inspect(value, func(n ast.Node) bool {
		if l, ok := n.(*ast.BasicLit); ok && isSQLLit(l) {
			found = true
		}
		return !found
	})
	return found
}

func isSQLLit(l *ast.BasicLit) bool {
	s, err := strconv.Unquote(l.Value)
	return l.Kind == token.STRING && err == nil && sqlWord.MatchString(s)
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func exprString(fset *token.FileSet, e ast.Expr) string {
	var b strings.Builder
	_ = printer.Fprint(&b, fset, e)
	return b.String()
}
