package boincimport_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/boinctest"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/transitioner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	oldDownloadURL = "http://old.example.org/example_download"
	oldUploadURL   = "http://old.example.org/example_cgi/file_upload_handler"
)

// fixture is a generated BOINC project, opened read-only, and an empty
// database of ours.
type fixture struct {
	p          boinctest.Project
	oldName    string
	oldDSN     string // the owner's: may write
	src        *store.BoincDB
	st         *store.Store
	codeSign   *rsa.PrivateKey
	ourDL      string
	oldDL      string
	checksums0 map[string]int64
}

func setup(t *testing.T, p boinctest.Project) *fixture {
	t.Helper()
	f := &fixture{ourDL: t.TempDir(), oldDL: t.TempDir()}
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	f.codeSign = k
	p.Now = 1_700_000_000
	p.DownloadURL, p.UploadURL, p.Fanout = oldDownloadURL, oldUploadURL, 1024
	p.DownloadDir, p.CodeSignKey = f.oldDL, k
	f.p = p
	f.oldDSN, f.oldName = boinctest.NewDatabase(t)
	ctx := context.Background()
	if err := boinctest.Fill(ctx, f.oldDSN, p); err != nil {
		t.Fatalf("generate BOINC project: %v", err)
	}
	src, err := store.OpenBoinc(ctx, boinctest.ReadOnlyDSN(t, f.oldDSN, f.oldName))
	if err != nil {
		t.Fatalf("open BOINC database as its read-only user: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	f.src = src
	f.st = storetest.New(t)
	if f.checksums0, err = src.TableChecksums(ctx, boinctest.Tables); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) config() boincimport.Config {
	return boincimport.Config{OldDownloadURL: oldDownloadURL, OldDownloadDir: f.oldDL, DownloadDir: f.ourDL, Fanout: 1024, Chunk: 7,
		Now: func() time.Time { return time.Unix(f.p.Now, 0) }}
}

func (f *fixture) run(t *testing.T, cfg boincimport.Config) boincimport.Report {
	t.Helper()
	im, err := boincimport.New(cfg, f.src, f.st)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := im.Run(context.Background())
	if err != nil {
		t.Fatalf("import: %v (report %+v)", err, rep)
	}
	return rep
}

// unchanged checks that no table of the BOINC database changed.
func (f *fixture) unchanged(t *testing.T, when string) {
	t.Helper()
	now, err := f.src.TableChecksums(context.Background(), boinctest.Tables)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range boinctest.Tables {
		if now[tb] != f.checksums0[tb] {
			t.Errorf("%s: BOINC table %s checksum %d, was %d before the import", when, tb, now[tb], f.checksums0[tb])
		}
	}
}

func table(t *testing.T, rep boincimport.Report, name string) boincimport.TableReport {
	t.Helper()
	for _, tr := range rep.Tables {
		if tr.Table == name {
			return tr
		}
	}
	t.Fatalf("report has no table %s: %+v", name, rep)
	return boincimport.TableReport{}
}

func count(t *testing.T, st *store.Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := st.DB().QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestImportCopiesProjectAndWorkInFlight imports a generated project with
// a user that may only read it, and checks what each kind of row became:
// accounts log in with their BOINC passwords, hosts keep their ids and
// cpids, app files keep their signatures, jobs in flight keep their
// instances, deadlines and outputs, finished jobs stay behind; the BOINC
// database is unchanged; a second run changes nothing.
func TestImportCopiesProjectAndWorkInFlight(t *testing.T) {
	t.Parallel()
	f := setup(t, boinctest.Project{Users: 40, Hosts: 60, Teams: 4, Jobs: 9, Finished: 5})
	ctx := context.Background()
	rep := f.run(t, f.config())

	for name, want := range map[string]int64{"platform": 2, "app": 1, "app_version": 4, "team": 4, "user": 40, "host": 60,
		"workunit": 27, "result": 45} {
		if tr := table(t, rep, name); tr.Imported != want || tr.Source != want || tr.Conflicts != 0 || tr.Skipped != 0 {
			t.Errorf("%s: report %+v, want %d imported of %d", name, tr, want, want)
		}
	}
	if rep.FinishedJobs != 5 {
		t.Errorf("finished jobs = %d, want 5", rep.FinishedJobs)
	}

	// Users: ids, keys, password hashes as they are, credit, team,
	// preferences.
	for _, id := range []int{1, 8} { // bcrypt, md5
		u, err := f.st.UserGet(ctx, int64(id))
		if err != nil {
			t.Fatalf("UserGet(%d): %v", id, err)
		}
		if u.Authenticator != boinctest.Authenticator(id) || u.EmailAddr != boinctest.Email(id) || u.TotalCredit != boinctest.UserCredit(id) ||
			u.TeamID != int64(boinctest.UserTeam(id, 4)) || u.CrossProjectID == "" {
			t.Errorf("user %d = %+v", id, u)
		}
		if ok, _ := passwd.Check(u.PasswdHash, passwd.ClientHash(boinctest.Password(id), boinctest.Email(id)), 4); !ok {
			t.Errorf("user %d: BOINC password does not check against imported hash %q", id, u.PasswdHash)
		}
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM user WHERE id = 8 AND country = 'Germany' AND project_prefs LIKE '<project_preferences>%' "+
		"AND global_prefs LIKE '<global_preferences>%' AND url <> ''"); n != 1 {
		t.Errorf("user 8's country, url and preferences not imported")
	}
	// Hosts: id, owner, cpid, seqno, credit.
	h, err := f.st.HostGet(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	if h.HostCPID != boinctest.HostCPID(9) || h.UserID != 9 || h.RPCSeqno != 19 || h.TotalCredit != boinctest.HostCredit(9) || h.PNCPUs != 4 {
		t.Errorf("host 9 = %+v", h)
	}
	// Teams keep their membership counts.
	if n := count(t, f.st, "SELECT COUNT(*) FROM team t WHERE nusers = (SELECT COUNT(*) FROM user u WHERE u.teamid = t.id)"); n != 4 {
		t.Errorf("%d of 4 teams have nusers equal to their members", n)
	}

	// App versions: the files as BOINC signed them, placed where our
	// scheduler's URLs point.
	var doc string
	if err := f.st.DB().GetContext(ctx, &doc, "SELECT xml_doc FROM app_version WHERE id = 4"); err != nil {
		t.Fatal(err)
	}
	v, err := appversion.Parse(doc)
	if err != nil || len(v.Files) != 1 {
		t.Fatalf("app version 4: %v %+v", err, v)
	}
	content := boinctest.AppFile(boinctest.PlatformID2, 710)
	if err := keys.Verify(&f.codeSign.PublicKey, content, v.Files[0].Signature); err != nil || !v.Files[0].MainProgram ||
		v.Files[0].Name != boinctest.AppFileName(boinctest.PlatformID2, 710) {
		t.Errorf("app version 4 file %+v: signature against the old code-signing key: %v", v.Files[0], err)
	}
	placed, err := os.ReadFile(filepath.Join(f.ourDL, fanout.Dir(v.Files[0].Name, 1024), v.Files[0].Name))
	if err != nil || !bytes.Equal(placed, content) {
		t.Errorf("app file in our download directory: %q, %v", placed, err)
	}

	// Jobs in flight: inputs served by us, instances with their
	// deadlines, output templates for new instances.
	wuID := int64(1) // wu_running_0: _0 in progress, _1 unsent
	w := storetest.Workunit(t, f.st, wuID)
	in, err := jobxml.ParseWorkunit(w.XMLDoc)
	if err != nil || len(in.Inputs) != 1 || len(in.Inputs[0].URLs) != 0 || in.Inputs[0].OpenName != "in" || in.CommandLine != "--seed 1" {
		t.Errorf("job 1 inputs %+v (%v): want one local input opened as in", in, err)
	}
	tmpl, err := f.st.JobTemplateGet(ctx, w.OutputTemplateID)
	if err != nil {
		t.Fatalf("job 1 output template %d: %v", w.OutputTemplateID, err)
	}
	out, err := jobtemplate.ParseOutput(tmpl.Body)
	if err != nil || len(out.Files) != 1 || out.Files[0].OpenName != "out" || out.Files[0].MaxNbytes != 65536 || !out.Files[0].CopyFile {
		t.Errorf("job 1 output template %+v (%v)", out, err)
	}
	rs := storetest.Results(t, f.st, wuID)
	if len(rs) != 2 || rs[0].ServerState != state.ServerInProgress || rs[0].HostID == 0 || rs[0].ReportDeadline != f.p.Now-1800+7*86400 ||
		rs[1].ServerState != state.ServerUnsent {
		t.Fatalf("job 1 instances %+v", rs)
	}
	outs, err := jobxml.ParseResult(rs[0].XMLDocIn)
	if err != nil || len(outs) != 1 || outs[0].Name != rs[0].Name+"_0" || outs[0].OpenName != "out" {
		t.Errorf("instance %s outputs %+v (%v)", rs[0].Name, outs, err)
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM workunit_user WHERE workunitid = ? AND userid = ? AND resultid = ?", wuID, rs[0].UserID, rs[0].ID); n != 1 {
		t.Errorf("no workunit_user row for the instance in progress")
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM workunit WHERE name LIKE 'wu_finished%'"); n != 0 {
		t.Errorf("%d finished jobs imported", n)
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM job_template"); n != 1 {
		t.Errorf("%d output templates stored, want 1 (all jobs share it)", n)
	}

	if cs, err := boincimport.Verify(ctx, f.src, f.st); err != nil {
		t.Errorf("verify after import: %v\n%s", err, boincimport.FormatComparisons(cs))
	}
	f.unchanged(t, "after the import")

	// Again: nothing new, nothing doubled.
	rep = f.run(t, f.config())
	for _, tr := range rep.Tables {
		if tr.Imported != 0 || tr.Present != tr.Source {
			t.Errorf("second run: %+v, want everything already here", tr)
		}
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM result"); n != 45 {
		t.Errorf("second run: %d results, want 45", n)
	}
}

// TestImportDryRunListsConflictsAndWritesNothing: a dry run on a database
// of ours that holds another user at a BOINC user's id writes nothing and
// lists the conflict; the real import then refuses before writing users.
func TestImportDryRunListsConflictsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, boinctest.Project{Users: 10, Hosts: 10, Teams: 2, Jobs: 3, Finished: 1})
	ours := storetest.User(t, f.st, storetest.UserOptions{}) // id 1, its own account key
	cfg := f.config()
	cfg.DryRun = true
	rep := f.run(t, cfg)
	if u := table(t, rep, "user"); u.Conflicts != 1 || len(u.ConflictIDs) != 1 || u.ConflictIDs[0] != ours.ID || u.Imported != 9 {
		t.Errorf("dry run users: %+v, want 1 conflict at id %d and 9 to import", u, ours.ID)
	}
	if h := table(t, rep, "host"); h.Imported != 10 || h.Conflicts != 0 {
		t.Errorf("dry run hosts: %+v", h)
	}
	for _, tb := range []string{"platform", "app", "app_version", "team", "host", "workunit", "result", "job_template"} {
		if n := count(t, f.st, "SELECT COUNT(*) FROM "+tb); n != 0 {
			t.Errorf("dry run wrote %d rows into %s", n, tb)
		}
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM user"); n != 1 {
		t.Errorf("dry run: %d users, want ours alone", n)
	}
	if entries, _ := os.ReadDir(f.ourDL); len(entries) != 0 {
		t.Errorf("dry run placed files: %v", entries)
	}

	im, err := boincimport.New(f.config(), f.src, f.st)
	if err != nil {
		t.Fatal(err)
	}
	_, err = im.Run(context.Background())
	if !errors.Is(err, boincimport.ErrConflict) || !strings.Contains(err.Error(), "user ids [1]") {
		t.Fatalf("import over a conflicting user: %v, want ErrConflict naming user 1", err)
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM user"); n != 1 {
		t.Errorf("after the refused import: %d users, want ours alone", n)
	}
	f.unchanged(t, "after a dry run and a refused import")
}

// TestImportResumesAfterInterruption stops an import mid-way (its context
// cancelled while it writes hosts, as a crash would drop its connection),
// runs it again, and finds every row once.
func TestImportResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	f := setup(t, boinctest.Project{Users: 3000, Hosts: 3000, Teams: 20, Jobs: 200, Finished: 20})
	cfg := f.config()
	cfg.Chunk = 100
	im, err := boincimport.New(cfg, f.src, f.st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := im.Run(ctx)
		done <- err
	}()
	var stopped int64
	for {
		var n int64
		if err := f.st.DB().QueryRow("SELECT COUNT(*) FROM host").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= 1000 {
			cancel()
			stopped = n
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err == nil {
		t.Fatal("import cancelled mid-way returned no error")
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM host"); n >= 3000 || n < stopped {
		t.Fatalf("interrupted import left %d hosts, want fewer than 3000 (it stopped after %d)", n, stopped)
	}
	rep := f.run(t, cfg)
	if h := table(t, rep, "host"); h.Present == 0 || h.Present+h.Imported != 3000 {
		t.Errorf("resumed hosts: %+v", h)
	}
	for tb, want := range map[string]int64{"user": 3000, "host": 3000, "team": 20, "workunit": 600, "result": 1000, "job_template": 1} {
		if n := count(t, f.st, "SELECT COUNT(*) FROM "+tb); n != want {
			t.Errorf("after the resumed import: %d rows in %s, want %d", n, tb, want)
		}
	}
	if cs, err := boincimport.Verify(context.Background(), f.src, f.st); err != nil {
		t.Errorf("verify: %v\n%s", err, boincimport.FormatComparisons(cs))
	}
}

// TestVerifyFindsCreditMismatch: verification fails when one user's
// credit differs.
func TestVerifyFindsCreditMismatch(t *testing.T) {
	t.Parallel()
	f := setup(t, boinctest.Project{Users: 10, Hosts: 10, Teams: 2})
	f.run(t, f.config())
	ctx := context.Background()
	if _, err := boincimport.Verify(ctx, f.src, f.st); err != nil {
		t.Fatalf("verify right after the import: %v", err)
	}
	storetest.Exec(t, f.st, "UPDATE user SET total_credit = total_credit + 0.5 WHERE id = 3")
	cs, err := boincimport.Verify(ctx, f.src, f.st)
	if !errors.Is(err, boincimport.ErrMismatch) {
		t.Fatalf("verify with one user's credit changed: %v, want ErrMismatch", err)
	}
	for _, c := range cs {
		if c.Match == (c.Table == "user") {
			t.Errorf("comparison %+v: only user should mismatch", c)
		}
	}
}

// TestOldDatabaseUnchangedAfterOurDaemonsRan: the way back. After the
// import our transitioner runs on the imported jobs (their deadlines
// passed: it times the instances out and makes new ones from the imported
// output template); BOINC's database is still as it was, for BOINC's
// daemons to start on again.
func TestOldDatabaseUnchangedAfterOurDaemonsRan(t *testing.T) {
	t.Parallel()
	f := setup(t, boinctest.Project{Users: 10, Hosts: 10, Teams: 2, Jobs: 5})
	f.run(t, f.config())
	later := time.Unix(f.p.Now+30*86400, 0)
	tr, err := transitioner.New(transitioner.Config{Mod: 1, Batch: 500, MaxOutputBytes: transitioner.DefaultMaxOutputBytes,
		TailInterval: transitioner.DefaultTailInterval},
		transitioner.Deps{Store: f.st, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.RunOnce(context.Background()); err != nil {
		t.Fatalf("transitioner pass on the imported jobs: %v", err)
	}
	if n := count(t, f.st, "SELECT COUNT(*) FROM result WHERE outcome = ?", state.OutcomeNoReply); n == 0 {
		t.Error("the transitioner timed out no imported instance")
	}
	var name, doc string
	if err := f.st.DB().QueryRow("SELECT name, xml_doc_in FROM result WHERE id > 25 ORDER BY id LIMIT 1").Scan(&name, &doc); err != nil {
		t.Fatalf("no instance made by our transitioner: %v", err)
	}
	outs, err := jobxml.ParseResult(doc)
	if err != nil || len(outs) != 1 || outs[0].Name != name+"_0" || outs[0].OpenName != "out" || outs[0].MaxNbytes != 65536 {
		t.Errorf("new instance %s outputs %+v (%v): want the BOINC job's output", name, outs, err)
	}
	f.unchanged(t, "after our transitioner ran on the imported copy")
}
