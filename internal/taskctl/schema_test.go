package taskctl_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/taskctl"
)

func TestSchemaUpgradeStatusAndCheck(t *testing.T) {
	b := setup(t, emptyDatabase(t))
	latest := schema.Latest()
	out, _, err := b.run(t, "schema", "status")
	if !errors.Is(err, store.ErrSchemaOlder) || !strings.Contains(out, "   1 0001_init.sql                pending\n") {
		t.Fatalf("schema status on an empty database = %q, %v; want 0001 pending and ErrSchemaOlder", out, err)
	}
	out = b.mustRun(t, "schema", "upgrade")
	if !strings.Contains(out, "applied schema version "+strconv.Itoa(latest)+"\n") {
		t.Fatalf("schema upgrade = %q", out)
	}
	out = b.mustRun(t, "schema", "status")
	if !strings.Contains(out, "   1 0001_init.sql                applied 2023-11-14T22:13:20Z\n") ||
		strings.Count(out, " applied ") != latest || strings.Contains(out, "pending") {
		t.Fatalf("schema status after upgrade = %q; want %d versions applied at the tool's clock", out, latest)
	}
	if out := b.mustRun(t, "schema", "check"); out != "schema matches version "+strconv.Itoa(latest)+"\n" {
		t.Fatalf("schema check on a fresh schema = %q", out)
	}
	if _, err := b.st.DB().Exec(`ALTER TABLE workunit ADD COLUMN hand_added INT NULL`); err != nil {
		t.Fatal(err)
	}
	out, _, err = b.run(t, "schema", "check")
	if !errors.Is(err, taskctl.ErrSchemaDrift) ||
		out != "table workunit column hand_added: not expected (int(11) DEFAULT NULL)\n" {
		t.Fatalf("schema check after ALTER TABLE = %q, %v; want the column reported and ErrSchemaDrift", out, err)
	}
	if _, err := b.st.DB().Exec(`INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future.sql', 0)`, latest+1); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"schema", "upgrade"}, {"schema", "check"}, {"schema", "status"}, {"status"}} {
		if _, _, err := b.run(t, cmd...); !errors.Is(err, store.ErrSchemaNewer) {
			t.Errorf("taskctl %s on a newer schema = %v; want ErrSchemaNewer", strings.Join(cmd, " "), err)
		}
	}
}
