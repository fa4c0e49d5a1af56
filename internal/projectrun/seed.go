package projectrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// The demo app's one platform and version, the ones simulated hosts claim.
const (
	DemoPlatform   = "x86_64-pc-linux-gnu"
	DemoVersionNum = 100
)

// SeedDemoApp adds the demo app with its one platform and app version and
// returns the app's id. The app's default templates are the demo job's
// (demoapp.InputTemplate, OutputTemplate), so a demo job submitted by hand
// (taskctl job submit --input IN --input shared:demo_model --input PARAMS)
// has the work generator's shape.
func SeedDemoApp(ctx context.Context, st *store.Store) (int64, error) {
	now := time.Now().Unix()
	pid, err := st.PlatformInsert(ctx, row.Platform{CreateTime: now, Name: DemoPlatform, UserFriendlyName: "Linux on x86-64"})
	if err != nil {
		return 0, err
	}
	inID, err := st.JobTemplatePut(ctx, jobtemplate.KindInput, demoapp.InputTemplate, now)
	if err != nil {
		return 0, err
	}
	outID, err := st.JobTemplatePut(ctx, jobtemplate.KindOutput, demoapp.OutputTemplate, now)
	if err != nil {
		return 0, err
	}
	aid, err := st.AppInsert(ctx, row.App{CreateTime: now, Name: demoapp.AppName, UserFriendlyName: "Demo: iterated SHA-256", Weight: 1,
		InputTemplateID: inID, OutputTemplateID: outID})
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
