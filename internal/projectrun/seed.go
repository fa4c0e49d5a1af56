package projectrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// The demo app's one platform and version, the ones simulated hosts claim.
const (
	DemoPlatform   = "x86_64-pc-linux-gnu"
	DemoVersionNum = 100
)

// SeedDemoApp adds the demo app with its one platform and app version and
// returns the app's id. The app keeps the built-in templates (one input
// "in", one output "out"), so a job submitted by hand with one input
// (taskctl job submit --input IN, the submission API's "input") runs as
// before; the work generator's jobs carry the demo templates themselves
// (demoapp.InputTemplate, OutputTemplate: three inputs, two outputs).
func SeedDemoApp(ctx context.Context, st *store.Store) (int64, error) {
	now := time.Now().Unix()
	pid, err := st.PlatformInsert(ctx, row.Platform{CreateTime: now, Name: DemoPlatform, UserFriendlyName: "Linux on x86-64"})
	if err != nil {
		return 0, err
	}
	aid, err := st.AppInsert(ctx, row.App{CreateTime: now, Name: demoapp.AppName, UserFriendlyName: "Demo: iterated SHA-256", Weight: 1})
	if err != nil {
		return 0, err
	}
	if _, err := st.AppVersionInsert(ctx, row.AppVersion{CreateTime: now, AppID: aid, VersionNum: DemoVersionNum, PlatformID: pid}); err != nil {
		return 0, err
	}
	return aid, nil
}

// SeedUsers adds n volunteer accounts, named prefix0, prefix1, … with
// addresses at example.org, and returns their authenticators in order.
func SeedUsers(ctx context.Context, st *store.Store, n int, prefix string) ([]string, error) {
	now := time.Now().Unix()
	auths := make([]string, 0, n)
	for i := range n {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("make authenticator: %w", err)
		}
		auth := hex.EncodeToString(b[:])
		name := fmt.Sprintf("%s%d", prefix, i)
		if _, err := st.UserInsert(ctx, row.User{CreateTime: now, EmailAddr: name + "@example.org", Name: name, Authenticator: auth}); err != nil {
			return nil, err
		}
		auths = append(auths, auth)
	}
	return auths, nil
}
