package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestProjectPrefsAndBeta checks that a user's project preferences and the
// beta flags of apps and versions are written and read back where the
// scheduler reads them (the per-request read and the feeder's tables), and
// that a NULL project_prefs (BOINC's rows) reads as none.
func TestProjectPrefsAndBeta(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	a := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Beta: true})
	v := storetest.AppVersion(t, st, storetest.AppVersionOptions{CreateTime: 1, App: a.ID, VersionNum: 1, Beta: true})
	apps, err := st.AppList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 1 || !apps[0].Beta {
		t.Errorf("AppList = %+v, want one beta app", apps)
	}
	vs, err := st.AppVersionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || !vs[0].Beta || vs[0].ID != v.ID {
		t.Errorf("AppVersionList = %+v, want version %d, beta", vs, v.ID)
	}

	u := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, Authenticator: "k"})
	storetest.Exec(t, st, `UPDATE user SET project_prefs = NULL WHERE id = ?`, u.ID)
	f, err := st.UserHostHeldGet(ctx, "k", 0, 10)
	got := f.User
	if err != nil || got.ProjectPrefs != "" {
		t.Fatalf("UserHostHeldGet with NULL project_prefs = %q, %v; want \"\", nil", got.ProjectPrefs, err)
	}
	const doc = "<project_preferences><app_id>3</app_id></project_preferences>"
	if err := st.UserSetProjectPrefs(ctx, u.ID, doc); err != nil {
		t.Fatal(err)
	}
	f, err = st.UserHostHeldGet(ctx, "k", 0, 10)
	got = f.User
	if err != nil || got.ProjectPrefs != doc {
		t.Errorf("UserHostHeldGet after UserSetProjectPrefs = %q, %v; want %q", got.ProjectPrefs, err, doc)
	}
	list, err := st.UserHostHeldList(ctx, []store.AuthHost{{Auth: "k"}}, 10)
	if err != nil || len(list) != 1 || list[0].User.ProjectPrefs != doc {
		t.Errorf("UserHostHeldList = %+v, %v; want the user with %q", list, err, doc)
	}
	if err := st.UserSetProjectPrefs(ctx, u.ID+1000, doc); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UserSetProjectPrefs(missing user) = %v, want ErrNotFound", err)
	}
}
