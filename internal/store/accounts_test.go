package store_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// Accounts made before version 3 (the operator tool left cross_project_id
// empty) get a cross-project id at the upgrade, each its own.
func TestSchemaUpgradeGivesAccountsACrossProjectID(t *testing.T) {
	t.Parallel()
	st := emptyStore(t)
	ctx := context.Background()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SchemaUpgrade(ctx, migs[:2], time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"a@example.org", "b@example.org"} {
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO user (create_time, email_addr, name, authenticator) VALUES (1, ?, 'x', ?)`,
			e, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SchemaUpgrade(ctx, migs, time.Unix(2000, 0)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := st.DB().SelectContext(ctx, &ids, `SELECT cross_project_id FROM user ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	if len(ids) != 2 || !hex32.MatchString(ids[0]) || !hex32.MatchString(ids[1]) || ids[0] == ids[1] {
		t.Fatalf("cross_project_id after the upgrade = %q, want 32 hex each, distinct", ids)
	}
}

// The stored password hash is replaced only while it is what the caller
// read: an upgrade at login never undoes a password set meanwhile.
func TestUserSetPasswdHashIsConditional(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	id := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "a", Authenticator: "k", PasswdHash: "old"}).ID
	if set, err := st.UserSetPasswdHash(ctx, id, "other", "new"); set || err != nil {
		t.Fatalf("UserSetPasswdHash from a stale value = %v, %v; want false, nil", set, err)
	}
	if set, err := st.UserSetPasswdHash(ctx, id, "old", "new"); !set || err != nil {
		t.Fatalf("UserSetPasswdHash = %v, %v; want true, nil", set, err)
	}
	if u, _ := st.UserGet(ctx, id); u.PasswdHash != "new" {
		t.Fatalf("passwd_hash = %q, want new", u.PasswdHash)
	}
	if err := st.UserSetAPIKeyHash(ctx, id+1, "h"); err == nil {
		t.Fatal("UserSetAPIKeyHash of a missing user succeeded")
	}
	if _, err := st.UserGetByAPIKeyHash(ctx, ""); err == nil {
		t.Fatal("the empty API key hash (no key) found a user")
	}
}
