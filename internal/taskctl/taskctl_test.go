package taskctl_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/taskctl"
)

// The tests do not run in parallel: urfave/cli v2 applies its package-level
// help flag to every app it runs, a data race between two apps in one
// process.

type bundle struct {
	dsn        string
	projectDir string
	now        time.Time
	st         *store.Store
	// stdin is the commands' standard input; nil reads nothing.
	stdin string
}

// setup opens dsn, if not empty, for the test to inspect.
func setup(t *testing.T, dsn string) *bundle {
	t.Helper()
	b := &bundle{dsn: dsn, projectDir: t.TempDir(), now: time.Unix(1_700_000_000, 0)}
	if dsn == "" {
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b.st = st
	return b
}

// run runs taskctl with the bundle's database and project directory and
// returns its standard output and error output.
func (b *bundle) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := taskctl.NewApp(taskctl.Options{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(b.stdin),
		Now: func() time.Time { return b.now }})
	full := []string{"taskctl", "--project-dir", b.projectDir, "--fanout", "16"}
	if b.dsn != "" {
		full = append(full, "--db-dsn", b.dsn)
	}
	full = append(full, args...)
	err := app.RunContext(context.Background(), full)
	return stdout.String(), stderr.String(), err
}

func (b *bundle) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := b.run(t, args...)
	if err != nil {
		t.Fatalf("taskctl %s: %v (stderr %q)", strings.Join(args, " "), err, errOut)
	}
	return out
}

// emptyDatabase creates a database with no tables, dropped after the test.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(storetest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "tstest_" + hex.EncodeToString(r[:])
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

func TestSchemaApplyAndVersion(t *testing.T) {
	b := setup(t, emptyDatabase(t))
	latest := strconv.Itoa(schema.Latest())
	if out := b.mustRun(t, "schema", "version"); !strings.Contains(out, "database schema version 0\n") ||
		!strings.Contains(out, "binary schema version "+latest) {
		t.Fatalf("schema version on an empty database = %q", out)
	}
	if _, _, err := b.run(t, "status"); err == nil {
		t.Fatal("status on an empty database succeeded, want a schema version error")
	}
	out := b.mustRun(t, "schema", "apply")
	if !strings.HasPrefix(out, "applied schema version 1\n") || !strings.Contains(out, "applied schema version "+latest+"\n") {
		t.Fatalf("schema apply on an empty database = %q, want versions 1..%s applied", out, latest)
	}
	if out := b.mustRun(t, "schema", "apply"); out != "schema is up to date at version "+latest+"\n" {
		t.Fatalf("second schema apply = %q", out)
	}
	if out := b.mustRun(t, "schema", "version"); !strings.Contains(out, "database schema version "+latest+"\n") {
		t.Fatalf("schema version after apply = %q", out)
	}
}

var idLine = regexp.MustCompile(`^(platform|app|app_version|job) ([0-9]+) `)

// id returns the id in a "<kind> <id> ..." line.
func id(t *testing.T, out string) int64 {
	t.Helper()
	m := idLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q: want \"<kind> <id> ...\"", out)
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return n
}

func TestCatalogAndUsers(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	platID := id(t, b.mustRun(t, "platform", "add", "--name", "x86_64-pc-linux-gnu", "--user-friendly-name", "Linux x86-64"))
	appID := id(t, b.mustRun(t, "app", "add", "--name", "demo"))
	avID := id(t, b.mustRun(t, "app-version", "add", "--app", "demo", "--platform", "x86_64-pc-linux-gnu",
		"--version-num", "100"))

	apps, err := b.st.AppList(ctx)
	if err != nil || len(apps) != 1 || apps[0].ID != appID || apps[0].UserFriendlyName != "demo" || apps[0].Weight != 1 ||
		apps[0].CreateTime != b.now.Unix() {
		t.Fatalf("AppList = %+v, %v; want demo with weight 1 and the default user-friendly name", apps, err)
	}
	plats, err := b.st.PlatformList(ctx)
	if err != nil || len(plats) != 1 || plats[0].ID != platID || plats[0].UserFriendlyName != "Linux x86-64" {
		t.Fatalf("PlatformList = %+v, %v", plats, err)
	}
	avs, err := b.st.AppVersionList(ctx)
	if err != nil || len(avs) != 1 || avs[0].ID != avID || avs[0].AppID != appID || avs[0].PlatformID != platID ||
		avs[0].VersionNum != 100 || avs[0].XMLDoc != "" {
		t.Fatalf("AppVersionList = %+v, %v", avs, err)
	}
	_, _, err = b.run(t, "app-version", "add", "--app", "demo", "--platform", "nosuch", "--version-num", "1")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "taskctl platform add") {
		t.Fatalf("app-version add with unknown platform = %v, want not found with a hint", err)
	}
	if _, _, err := b.run(t, "app", "add", "--name", "demo"); err == nil {
		t.Fatal("adding app demo twice succeeded, want an error")
	}
	if _, _, err := b.run(t, "app", "add"); err == nil {
		t.Fatal("app add without --name succeeded, want an error")
	}

	out, errOut, err := b.run(t, "user", "create", "--email", "alice@example.org", "--name", "Alice")
	if err != nil {
		t.Fatalf("user create: %v", err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}\n$`).MatchString(out) {
		t.Fatalf("user create stdout = %q, want just a 32-hex authenticator", out)
	}
	auth := strings.TrimSpace(out)
	if strings.Contains(errOut, auth) {
		t.Fatalf("user create printed the authenticator on stderr: %q", errOut)
	}
	u, err := b.st.UserGetByEmail(ctx, "alice@example.org")
	if err != nil || u.Authenticator != auth || u.Name != "Alice" {
		t.Fatalf("user alice@example.org = %+v, %v; want Alice with the authenticator printed", u, err)
	}
	out2 := b.mustRun(t, "user", "create", "--email", "bob@example.org", "--name", "Bob")
	if out2 == out {
		t.Fatal("two users got the same authenticator")
	}
	if _, _, err := b.run(t, "user", "create", "--email", "alice@example.org", "--name", "Again"); err == nil {
		t.Fatal("user create with a taken e-mail succeeded, want an error")
	}
}

func TestJobSubmitAndStatus(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "demo")
	input := filepath.Join(b.projectDir, "in.dat")
	if err := os.WriteFile(input, []byte("the input"), 0o644); err != nil {
		t.Fatal(err)
	}
	wuID := id(t, b.mustRun(t, "job", "submit", "--app", "demo", "--name", "j1", "--input", input,
		"--min-quorum", "1", "--target-nresults", "1", "--delay-bound", "2h", "--priority", "5"))
	wu, err := b.st.WorkunitGet(ctx, wuID)
	if err != nil || wu.Name != "j1" || wu.MinQuorum != 1 || wu.TargetNResults != 1 || wu.DelayBound != 7200 ||
		wu.Priority != 5 || wu.TransitionTime != b.now.Unix() || wu.RscFpopsBound != 1e13 {
		t.Fatalf("submitted job = %+v, %v; want the flags' parameters", wu, err)
	}
	path, _ := fanout.Path(filepath.Join(b.projectDir, "download"), jobs.InputName("j1"), 16)
	if got, err := os.ReadFile(path); err != nil || string(got) != "the input" {
		t.Fatalf("staged input at %s = %q, %v", path, got, err)
	}
	if _, _, err := b.run(t, "job", "submit", "--app", "demo", "--name", "j1", "--input", input); !errors.Is(err, jobs.ErrJobExists) {
		t.Fatalf("resubmitting j1 = %v, want ErrJobExists", err)
	}
	if _, _, err := b.run(t, "job", "submit", "--app", "demo", "--input", input, "--min-quorum", "3"); err == nil {
		t.Fatal("job submit with min-quorum above target-nresults succeeded, want an error")
	}
	if _, _, err := b.run(t, "job", "submit", "--app", "nosuch", "--input", input); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("job submit for a missing app = %v, want ErrNotFound", err)
	}
	// A generated name, and parameters from the project configuration file.
	conf := filepath.Join(b.projectDir, "project.yaml")
	body := "db-dsn: " + b.dsn + "\nmin-quorum: 3\ntarget-nresults: 4\nmax-success-results: 5\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	j2 := id(t, b.mustRun(t, "--config", conf, "job", "submit", "--app", "demo", "--input", input, "--target-nresults", "3"))
	wu2, err := b.st.WorkunitGet(ctx, j2)
	if err != nil || wu2.MinQuorum != 3 || wu2.TargetNResults != 3 || wu2.MaxSuccessResults != 5 ||
		!strings.HasPrefix(wu2.Name, "demo_1700000000_") {
		t.Fatalf("job from config = %+v, %v; want min_quorum 3 and max_success 5 from the file, target 3 from the flag", wu2, err)
	}

	// Give j1 some instances in several states.
	for i, s := range []struct {
		server  state.ServerState
		outcome state.Outcome
		fds     state.FileDeleteState
	}{
		{state.ServerUnsent, state.OutcomeInit, state.FileDeleteInit},
		{state.ServerInProgress, state.OutcomeInit, state.FileDeleteInit},
		{state.ServerOver, state.OutcomeSuccess, state.FileDeleteReady},
		{state.ServerOver, state.OutcomeSuccess, state.FileDeleteError},
	} {
		storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, Name: "j1_" + strconv.Itoa(i),
			ServerState: s.server, Outcome: s.outcome, FileDeleteState: s.fds})
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET need_validate = 1, transition_time = ?, hold_reason = ? WHERE id = ?`,
		b.now.Unix()+100, state.ErrTooManyErrorResults, wuID); err != nil {
		t.Fatal(err)
	}
	out := b.mustRun(t, "status")
	for _, want := range []string{"unsent", "in_progress", "over", "success", "need transition", "need validation", "file deletion errors", "held"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	var s taskctl.Status
	if err := json.Unmarshal([]byte(b.mustRun(t, "status", "--json")), &s); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	counts := map[string]int64{}
	for _, r := range s.Results {
		counts[r.ServerState+"/"+r.Outcome] = r.Count
	}
	if counts["unsent/init"] != 1 || counts["in_progress/init"] != 1 || counts["over/success"] != 2 || len(counts) != 3 {
		t.Errorf("status --json results = %+v", s.Results)
	}
	if s.Workunits != (taskctl.WorkunitCounts{Total: 2, NeedTransition: 1, NeedValidate: 1, Held: 1}) {
		t.Errorf("status --json workunits = %+v, want 2 jobs, 1 due for transition, 1 needing validation, 1 held", s.Workunits)
	}
	if s.ResultFiles != (taskctl.ResultFileCounts{Total: 4, FileDeleteReady: 1, FileDeleteError: 1}) {
		t.Errorf("status --json result files = %+v", s.ResultFiles)
	}
}

func TestKeysGenerate(t *testing.T) {
	b := setup(t, "") // needs no database
	out := b.mustRun(t, "keys", "generate")
	dir := filepath.Join(b.projectDir, "keys")
	checkPair := func(dir, pair string) {
		t.Helper()
		priv, err := keys.ReadPrivateFile(filepath.Join(dir, pair+"_private"))
		if err != nil {
			t.Fatalf("ReadPrivateFile(%s_private): %v", pair, err)
		}
		pub, err := keys.ReadPublicFile(filepath.Join(dir, pair+"_public"))
		if err != nil || !pub.Equal(&priv.PublicKey) {
			t.Fatalf("%s_public = %v, %v; want the private key's public half", pair, pub, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, pair+"_private")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s_private mode = %v, %v; want 0600", pair, fi.Mode(), err)
		}
	}
	if !strings.Contains(out, filepath.Join(dir, "upload_private")) {
		t.Errorf("keys generate output %q does not name upload_private", out)
	}
	checkPair(dir, "upload")
	// The code-signing private key is what lets a thief of the server ship
	// programs every volunteer runs: by default it is not made here.
	if _, err := os.Stat(filepath.Join(dir, "code_sign_private")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("keys generate left code_sign_private in the project (%v); want it made offline", err)
	}
	if !strings.Contains(out, "--code-sign-out") {
		t.Errorf("keys generate output %q does not say how to make the code-signing key", out)
	}

	// --code-sign-out: the private key goes to the named place, only the
	// public half into the project.
	offline := filepath.Join(t.TempDir(), "offline")
	out = b.mustRun(t, "keys", "generate", "--pair", "code_sign", "--code-sign-out", offline)
	checkPair(offline, "code_sign")
	if _, err := os.Stat(filepath.Join(dir, "code_sign_private")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("keys generate --code-sign-out left code_sign_private in the project (%v)", err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "code_sign_public"))
	if offPub, _ := os.ReadFile(filepath.Join(offline, "code_sign_public")); len(pub) == 0 || !bytes.Equal(pub, offPub) {
		t.Fatalf("project code_sign_public %q, offline %q; want the same public key in both", pub, offPub)
	}
	if !strings.Contains(out, filepath.Join(offline, "code_sign_private")) {
		t.Errorf("keys generate --code-sign-out output %q does not name the private key's path", out)
	}

	if _, _, err := b.run(t, "keys", "generate"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second keys generate = %v, want a refusal naming --force", err)
	}
	// The old way, asked for by name.
	b.mustRun(t, "keys", "generate", "--force", "--code-sign-on-server")
	checkPair(dir, "code_sign")
	if now, _ := os.ReadFile(filepath.Join(dir, "code_sign_public")); bytes.Equal(now, pub) {
		t.Fatal("keys generate --force kept the old code_sign key")
	}
	if _, _, err := b.run(t, "keys", "generate", "--force", "--code-sign-on-server", "--code-sign-out", offline); err == nil {
		t.Error("keys generate with --code-sign-on-server and --code-sign-out succeeded, want an error")
	}
}
