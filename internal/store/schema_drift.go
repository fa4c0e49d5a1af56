package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/dsnlist"
)

// SchemaShape is what the drift check compares: a database's tables, their
// columns and their indexes, as information_schema reports them.
type SchemaShape map[string]TableShape

// TableShape is one table of a SchemaShape.
type TableShape struct {
	Engine  string
	Columns map[string]ColumnShape
	Indexes map[string]IndexShape
}

// ColumnShape is one column: the full type (as in "int(11)" or
// "varchar(254)"), nullability, default (as the server spells it; NULL
// when there is none) and extra ("auto_increment").
type ColumnShape struct {
	Type     string
	Nullable bool
	Default  sql.NullString
	Extra    string
}

// IndexShape is one index: its columns in order (with a prefix length when
// only a prefix is indexed) and whether it is unique.
type IndexShape struct {
	Unique  bool
	Columns []string
}

// SchemaDescribe reads the shape of the store's database from
// information_schema, leaving out the upgrade's own bookkeeping tables
// (its progress and its lock).
func (s *Store) SchemaDescribe(ctx context.Context) (SchemaShape, error) {
	var tables []struct {
		Name   string         `db:"name"`
		Engine sql.NullString `db:"engine"`
	}
	if err := s.db.SelectContext(ctx, &tables, `SELECT TABLE_NAME AS name, ENGINE AS engine
        FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'`); err != nil {
		return nil, fmt.Errorf("describe schema: tables: %w", err)
	}
	shape := SchemaShape{}
	for _, t := range tables {
		if t.Name == schemaProgressTable || t.Name == schemaLockTable {
			continue
		}
		shape[t.Name] = TableShape{Engine: t.Engine.String, Columns: map[string]ColumnShape{}, Indexes: map[string]IndexShape{}}
	}
	var cols []struct {
		Table    string         `db:"tbl"`
		Name     string         `db:"name"`
		Type     string         `db:"type"`
		Nullable string         `db:"nullable"`
		Default  sql.NullString `db:"dflt"`
		Extra    string         `db:"extra"`
	}
	if err := s.db.SelectContext(ctx, &cols, `SELECT TABLE_NAME AS tbl, COLUMN_NAME AS name,
        COLUMN_TYPE AS type, IS_NULLABLE AS nullable, COLUMN_DEFAULT AS dflt, EXTRA AS extra
        FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()`); err != nil {
		return nil, fmt.Errorf("describe schema: columns: %w", err)
	}
	for _, c := range cols {
		if t, ok := shape[c.Table]; ok {
			t.Columns[c.Name] = ColumnShape{Type: c.Type, Nullable: c.Nullable == "YES", Default: c.Default, Extra: c.Extra}
		}
	}
	var idx []struct {
		Table     string        `db:"tbl"`
		Name      string        `db:"name"`
		NonUnique int           `db:"non_unique"`
		Column    string        `db:"col"`
		SubPart   sql.NullInt64 `db:"sub_part"`
	}
	if err := s.db.SelectContext(ctx, &idx, `SELECT TABLE_NAME AS tbl, INDEX_NAME AS name,
        NON_UNIQUE AS non_unique, COLUMN_NAME AS col, SUB_PART AS sub_part
        FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
        ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`); err != nil {
		return nil, fmt.Errorf("describe schema: indexes: %w", err)
	}
	for _, i := range idx {
		t, ok := shape[i.Table]
		if !ok {
			continue
		}
		col := i.Column
		if i.SubPart.Valid {
			col = fmt.Sprintf("%s(%d)", col, i.SubPart.Int64)
		}
		ix := t.Indexes[i.Name]
		ix.Unique = i.NonUnique == 0
		ix.Columns = append(ix.Columns, col)
		t.Indexes[i.Name] = ix
	}
	return shape, nil
}

// SchemaDiff lists every way got differs from want, one line each, sorted;
// none means no drift.
func SchemaDiff(want, got SchemaShape) []string {
	var out []string
	for name, wt := range want {
		gt, ok := got[name]
		if !ok {
			out = append(out, fmt.Sprintf("table %s: missing", name))
			continue
		}
		if wt.Engine != gt.Engine {
			out = append(out, fmt.Sprintf("table %s: engine %s, want %s", name, gt.Engine, wt.Engine))
		}
		for cn, wc := range wt.Columns {
			gc, ok := gt.Columns[cn]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("table %s column %s: missing", name, cn))
			case gc != wc:
				out = append(out, fmt.Sprintf("table %s column %s: %s, want %s", name, cn, gc, wc))
			}
		}
		for cn, gc := range gt.Columns {
			if _, ok := wt.Columns[cn]; !ok {
				out = append(out, fmt.Sprintf("table %s column %s: not expected (%s)", name, cn, gc))
			}
		}
		for in, wi := range wt.Indexes {
			gi, ok := gt.Indexes[in]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("table %s index %s: missing (want %s)", name, in, wi))
			case gi.Unique != wi.Unique || !slices.Equal(gi.Columns, wi.Columns):
				out = append(out, fmt.Sprintf("table %s index %s: %s, want %s", name, in, gi, wi))
			}
		}
		for in, gi := range gt.Indexes {
			if _, ok := wt.Indexes[in]; !ok {
				out = append(out, fmt.Sprintf("table %s index %s: not expected (%s)", name, in, gi))
			}
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("table %s: not expected", name))
		}
	}
	sort.Strings(out)
	return out
}

// String spells a column as in a CREATE TABLE.
func (c ColumnShape) String() string {
	var b strings.Builder
	b.WriteString(c.Type)
	if !c.Nullable {
		b.WriteString(" NOT NULL")
	}
	if c.Default.Valid {
		b.WriteString(" DEFAULT " + c.Default.String)
	}
	if c.Extra != "" {
		b.WriteString(" " + strings.ToUpper(c.Extra))
	}
	return b.String()
}

// String spells an index as in a CREATE TABLE.
func (i IndexShape) String() string {
	kind := "KEY"
	if i.Unique {
		kind = "UNIQUE KEY"
	}
	return kind + " (" + strings.Join(i.Columns, ", ") + ")"
}

// SchemaDrift compares the live schema of the database at dsn with the one
// migs produce. The expected schema is built on the same server, in a
// scratch database named after the live one and dropped after, so both
// sides are spelled by the same server version. It applies only the
// versions the live database has recorded, so a database that is merely
// behind shows its drift, not the pending upgrade; the live version is
// returned too. The DSN's user needs CREATE and DROP on the server.
func SchemaDrift(ctx context.Context, dsn string, migs []schema.Migration) (diffs []string, version int, err error) {
	cfgs, err := dsnlist.Split(dsn)
	if err != nil {
		return nil, 0, fmt.Errorf("schema drift: parse database DSN: %w", err)
	}
	if cfgs[0].DBName == "" {
		return nil, 0, errors.New("schema drift: the database DSN names no database")
	}
	live, err := Open(ctx, dsn, Options{MaxOpenConns: 2})
	if err != nil {
		return nil, 0, err
	}
	defer live.Close()
	version, err = live.SchemaVersion(ctx)
	if err != nil {
		return nil, 0, err
	}
	if version > len(migs) {
		return nil, version, fmt.Errorf("schema drift: database is at version %d, this binary knows up to %d: %w",
			version, len(migs), ErrSchemaNewer)
	}
	got, err := live.SchemaDescribe(ctx)
	if err != nil {
		return nil, version, err
	}
	want, err := scratchShape(ctx, cfgs, migs[:version])
	if err != nil {
		return nil, version, err
	}
	return SchemaDiff(want, got), version, nil
}

// scratchShape applies migs to a new scratch database beside the one at
// the addresses cfgs (the first names it) and returns its shape; the
// scratch database is dropped even if ctx ends.
func scratchShape(ctx context.Context, cfgs []*mysql.Config, migs []schema.Migration) (_ SchemaShape, err error) {
	cfg := cfgs[0]
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := cfg.DBName
	if len(base) > 32 {
		base = base[:32]
	}
	name := base + "_schema_check_" + hex.EncodeToString(b[:])
	admins := make([]string, len(cfgs))
	for i, c := range cfgs {
		admin := c.Clone()
		admin.DBName = ""
		admins[i] = admin.FormatDSN()
	}
	st, err := Open(ctx, dsnlist.Join(admins), Options{MaxOpenConns: 1})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := st.db.ExecContext(ctx, schema.CreateDatabase(name)); err != nil {
		return nil, fmt.Errorf("schema drift: create scratch database %s: %w", name, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, derr := st.db.ExecContext(dctx, "DROP DATABASE IF EXISTS `"+name+"`"); derr != nil {
			err = errors.Join(err, fmt.Errorf("schema drift: drop scratch database %s: %w", name, derr))
		}
	}()
	scfg := cfg.Clone()
	scfg.DBName = name
	scratch, err := Open(ctx, scfg.FormatDSN(), Options{MaxOpenConns: 2})
	if err != nil {
		return nil, err
	}
	defer scratch.Close()
	// The clock only stamps the scratch database's schema_version rows.
	if _, err := scratch.SchemaUpgrade(ctx, migs, time.Unix(0, 0)); err != nil {
		return nil, fmt.Errorf("schema drift: build expected schema in %s: %w", name, err)
	}
	return scratch.SchemaDescribe(ctx)
}
