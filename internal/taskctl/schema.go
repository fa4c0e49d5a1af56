package taskctl

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
)

// ErrSchemaDrift is returned by "schema check" when the live schema differs
// from the expected one, so the tool exits non-zero.
var ErrSchemaDrift = errors.New("the database schema differs from the expected one")

func (t *tool) schemaCommand() *cli.Command {
	return &cli.Command{
		Name:  "schema",
		Usage: "create, upgrade or inspect the database schema",
		Subcommands: []*cli.Command{
			{
				Name:    "upgrade",
				Aliases: []string{"apply"},
				Usage: "create the tables or upgrade them to this binary's schema version; prints the versions " +
					"applied. Stops at the first failing statement; run it again once the cause is fixed and it " +
					"resumes there",
				Action: func(c *cli.Context) error {
					return t.withStore(c, true, func(ctx context.Context, st *store.Store, _ config.Common) error {
						applied, err := st.SchemaApply(ctx, t.now())
						for _, v := range applied {
							t.printf("applied schema version %d\n", v)
						}
						if err != nil {
							return err
						}
						if len(applied) == 0 {
							t.printf("schema is up to date at version %d\n", schema.Latest())
						}
						return nil
					})
				},
			},
			{
				Name:  "version",
				Usage: "print the database's schema version and this binary's",
				Action: func(c *cli.Context) error {
					return t.withStore(c, true, func(ctx context.Context, st *store.Store, _ config.Common) error {
						v, err := st.SchemaVersion(ctx)
						if err != nil {
							return err
						}
						t.printf("database schema version %d\nbinary schema version %d\n", v, schema.Latest())
						return nil
					})
				},
			},
			{
				Name: "status",
				Usage: "list the applied schema versions with when they were applied, an upgrade left half-way, " +
					"and the versions this binary would apply",
				Action: func(c *cli.Context) error {
					return t.withStore(c, true, func(ctx context.Context, st *store.Store, _ config.Common) error {
						return t.schemaStatus(ctx, st)
					})
				},
			},
			{
				Name: "check",
				Usage: "compare the live schema (tables, columns, indexes) with the one the applied migrations " +
					"give, built in a scratch database on the same server and dropped after; prints every " +
					"difference and fails if there is one",
				Action: func(c *cli.Context) error {
					return t.withStore(c, true, func(ctx context.Context, _ *store.Store, cfg config.Common) error {
						migs, err := schema.Migrations()
						if err != nil {
							return err
						}
						diffs, v, err := store.SchemaDrift(ctx, cfg.DBDSN, migs)
						if err != nil {
							return err
						}
						for _, d := range diffs {
							t.printf("%s\n", d)
						}
						if len(diffs) > 0 {
							return ErrSchemaDrift
						}
						t.printf("schema matches version %d\n", v)
						if v < len(migs) {
							t.notef("database is at version %d, this binary's is %d: run taskctl schema upgrade\n", v, len(migs))
						}
						return nil
					})
				},
			},
		},
	}
}

// schemaStatus prints one line per known or applied version:
// "<version> <name> applied <RFC 3339 time>", "... pending" or "... partly
// applied (k of n statements)".
func (t *tool) schemaStatus(ctx context.Context, st *store.Store) error {
	applied, prog, err := st.SchemaStatus(ctx)
	if err != nil {
		return err
	}
	migs, err := schema.Migrations()
	if err != nil {
		return err
	}
	done := map[int]bool{}
	for _, a := range applied {
		done[a.Version] = true
		t.printf("%4d %-28s applied %s\n", a.Version, a.Name, time.Unix(a.AppliedAt, 0).UTC().Format(time.RFC3339))
	}
	for _, m := range migs {
		switch {
		case done[m.Version]:
		case prog != nil && prog.Version == m.Version:
			t.printf("%4d %-28s partly applied (%d of %d statements; run taskctl schema upgrade to resume)\n",
				m.Version, m.Name, prog.Statements, len(schema.Statements(m.SQL)))
		default:
			t.printf("%4d %-28s pending\n", m.Version, m.Name)
		}
	}
	if err := st.SchemaCheck(ctx); err != nil {
		return err
	}
	return nil
}
