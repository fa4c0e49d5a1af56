package scheduler

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"

	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const samples = "../protocol/testdata/samples/"

// The password and address of samples 20 and 21, and the hash PROTOCOL.md
// §10 records the client sending for them.
const (
	samplePassword = "secret123"
	sampleEmail    = "tester@example.com"
	sampleHash     = "4f9932fb9f503d506cf3acbad04ec278"
)

// tablesCache is a cache that only has tables.
type tablesCache struct {
	Cache
	t shmcache.Tables
}

func (c tablesCache) Tables() (shmcache.Tables, uint64, error) { return c.t, 1, nil }
func (c tablesCache) Current() (Cache, error)                  { return c, nil }

type accountsFixture struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	a   *Accounts
	srv *httptest.Server
	reg *prometheus.Registry
}

func setupAccounts(t *testing.T, creation bool) *accountsFixture {
	t.Helper()
	f := &accountsFixture{t: t, ctx: context.Background(), st: storetest.New(t), reg: prometheus.NewRegistry()}
	cache := tablesCache{t: shmcache.Tables{
		Platforms: []row.Platform{
			{ID: 1, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux on 64-bit x86"},
			{ID: 2, Name: "windows_x86_64", UserFriendlyName: "Windows on 64-bit x86"},
			{ID: 3, Name: "old_platform", UserFriendlyName: "Old", Deprecated: true},
			{ID: 4, Name: "arm-linux", UserFriendlyName: "Linux on ARM"},
		},
		Apps: []row.App{{ID: 1, Name: "demo"}, {ID: 2, Name: "gone", Deprecated: true}},
		AppVersions: []row.AppVersion{
			{ID: 1, AppID: 1, PlatformID: 1, VersionNum: 100},
			{ID: 2, AppID: 1, PlatformID: 1, VersionNum: 101},
			{ID: 3, AppID: 1, PlatformID: 1, VersionNum: 101, PlanClass: "mt"},
			{ID: 4, AppID: 1, PlatformID: 2, VersionNum: 100, Deprecated: true},
			{ID: 5, AppID: 1, PlatformID: 3, VersionNum: 100},
			{ID: 6, AppID: 2, PlatformID: 4, VersionNum: 100},
		},
	}}
	var err error
	f.a, err = NewAccounts(AccountOptions{Store: f.st, Cache: cache, URLBase: "http://127.0.0.1:8080",
		ProjectName: "Test & Project", AccountCreation: creation, Registerer: f.reg,
		// bcrypt is slow under the race detector; the cost changes nothing else.
		PasswdCost: bcrypt.MinCost,
		Now:        func() time.Time { return time.Unix(t0, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	// The samples were captured from a project under /myproject/; the
	// handler answers by the path's last element wherever it is mounted.
	f.srv = httptest.NewServer(f.a)
	t.Cleanup(f.srv.Close)
	return f
}

// sampleURL returns the path and query of a captured GET.
func sampleURL(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(samples + file)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	if len(fields) < 2 || fields[0] != "GET" {
		t.Fatalf("%s: first line %q is not a GET", file, fields)
	}
	return fields[1]
}

func (f *accountsFixture) get(pathQuery string) string {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + pathQuery)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET %s = %d %q, want 200", pathQuery, resp.StatusCode, b)
	}
	return string(b)
}

// accountReply is what the client reads from lookup and create replies.
type accountReply struct {
	XMLName       xml.Name
	Authenticator string    `xml:"authenticator"`
	Success       *struct{} `xml:"success"`
	ErrorNum      int       `xml:"error_num"`
	ErrorMsg      string    `xml:"error_msg"`
}

func (f *accountsFixture) account(pathQuery string) accountReply {
	f.t.Helper()
	body := f.get(pathQuery)
	var r accountReply
	if err := xml.Unmarshal([]byte(body), &r); err != nil {
		f.t.Fatalf("GET %s: reply %q: %v", pathQuery, body, err)
	}
	return r
}

func (f *accountsFixture) addUser(email, hash string) row.User {
	f.t.Helper()
	return storetest.User(f.t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: email, Name: "u",
		Authenticator: fmt.Sprintf("auth%x", len(email)*7919+len(hash)), PasswdHash: hash})
}

func TestGetProjectConfig(t *testing.T) {
	t.Parallel()
	for _, creation := range []bool{false, true} {
		t.Run(fmt.Sprint("creation=", creation), func(t *testing.T) {
			t.Parallel()
			f := setupAccounts(t, creation)
			body := f.get(sampleURL(t, "19_get_project_config_GET.http"))
			var pc struct {
				XMLName                 xml.Name `xml:"project_config"`
				Name                    string   `xml:"name"`
				MasterURL               string   `xml:"master_url"`
				WebRPCURLBase           string   `xml:"web_rpc_url_base"`
				MinPasswdLength         int      `xml:"min_passwd_length"`
				UsesUsername            string   `xml:"uses_username"`
				AccountCreationDisabled string   `xml:"account_creation_disabled"`
				Platforms               []struct {
					Name      string `xml:"platform_name"`
					Friendly  string `xml:"user_friendly_name"`
					PlanClass string `xml:"plan_class"`
				} `xml:"platforms>platform"`
			}
			if err := xml.Unmarshal([]byte(body), &pc); err != nil {
				t.Fatalf("project_config %q: %v", body, err)
			}
			wantDisabled := "1"
			if creation {
				wantDisabled = "0"
			}
			if pc.Name != "Test & Project" || pc.MasterURL != "http://127.0.0.1:8080/" || pc.WebRPCURLBase != pc.MasterURL ||
				pc.MinPasswdLength != 6 || pc.UsesUsername != "0" || pc.AccountCreationDisabled != wantDisabled {
				t.Fatalf("project_config = %+v, want name, master URL as RPC base, min_passwd_length 6, uses_username 0, account_creation_disabled %s\n%s",
					pc, wantDisabled, body)
			}
			got := fmt.Sprint(pc.Platforms)
			want := "[{x86_64-pc-linux-gnu Linux on 64-bit x86 } {x86_64-pc-linux-gnu Linux on 64-bit x86 mt}]"
			if got != want {
				t.Fatalf("platforms = %s, want %s (only platforms with a usable version of a live app)", got, want)
			}
		})
	}
}

func TestLookupAccount(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, false)
	u := f.addUser(sampleEmail, passwd.ClientHash(samplePassword, sampleEmail))
	f.addUser("nopassword@example.com", "")
	sample := sampleURL(t, "20_lookup_account_GET.http")
	if !strings.Contains(sample, "passwd_hash="+sampleHash) {
		t.Fatalf("sample 20 %q does not carry the hash of PROTOCOL.md §10", sample)
	}

	for _, tt := range []struct {
		name, url string
		auth      string
		success   bool
		errNum    int
	}{
		{"sample 20", sample, u.Authenticator, false, 0},
		{"address in capitals", "/lookup_account.php?email_addr=TESTER%40Example.com&passwd_hash=" + sampleHash, u.Authenticator, false, 0},
		{"hash in capitals", "/lookup_account.php?email_addr=tester%40example.com&passwd_hash=" + strings.ToUpper(sampleHash), u.Authenticator, false, 0},
		{"wrong password", "/lookup_account.php?email_addr=tester%40example%2Ecom&passwd_hash=" + passwd.ClientHash("wrong", sampleEmail), "", false, errBadPasswd},
		{"empty hash", "/lookup_account.php?email_addr=tester%40example%2Ecom&passwd_hash=", "", false, errBadPasswd},
		{"account without a password", "/lookup_account.php?email_addr=nopassword%40example.com&passwd_hash=", "", false, errBadPasswd},
		{"unknown address", "/lookup_account.php?email_addr=nobody%40example.com&passwd_hash=" + sampleHash, "", false, errBadPasswd},
		{"no address", "/lookup_account.php", "", false, errBadPasswd},
		{"existence only", "/lookup_account.php?email_addr=tester%40example%2Ecom", "", false, errBadPasswd},
		{"existence of unknown", "/lookup_account.php?email_addr=nobody%40example%2Ecom", "", false, errBadPasswd},
		{"ldap", "/lookup_account.php?ldap_auth=1&ldap_uid=x&passwd=y", "", false, errNotImplemented},
	} {
		r := f.account(tt.url)
		if r.Authenticator != tt.auth || (r.Success != nil) != tt.success || r.ErrorNum != tt.errNum {
			t.Errorf("%s: GET %s = %+v, want authenticator %q, success %v, error_num %d", tt.name, tt.url, r, tt.auth, tt.success, tt.errNum)
		}
		if tt.errNum != 0 && (r.XMLName.Local != "error" || r.ErrorMsg == "") {
			t.Errorf("%s: error reply %+v, want <error> with a message", tt.name, r)
		}
		if tt.errNum == 0 && r.XMLName.Local != "account_out" {
			t.Errorf("%s: reply element %q, want account_out", tt.name, r.XMLName.Local)
		}
	}
	if got := testutil.ToFloat64(f.a.rpcs.WithLabelValues(rpcLookupAccount, "ok")); got != 3 {
		t.Errorf("account_rpcs_total{lookup_account,ok} = %v, want 3", got)
	}
}

func TestCreateAccount(t *testing.T) {
	t.Parallel()
	sample := sampleURL(t, "21_create_account_GET.http")

	off := setupAccounts(t, false)
	if r := off.account(sample); r.ErrorNum != errAcctCreationDisabled {
		t.Fatalf("create with account creation off: %+v, want error %d", r, errAcctCreationDisabled)
	}
	if _, err := off.st.UserGetByEmail(off.ctx, sampleEmail); err == nil {
		t.Fatal("account created while creation is off")
	}

	f := setupAccounts(t, true)
	r := f.account(sample)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.Authenticator) || r.ErrorNum != 0 {
		t.Fatalf("create (sample 21) = %+v, want a 32-hex authenticator", r)
	}
	u, err := f.st.UserGetByEmail(f.ctx, sampleEmail)
	if ok, _ := passwd.Check(u.PasswdHash, sampleHash, bcrypt.MinCost); err != nil || u.Authenticator != r.Authenticator || !ok || u.Name != "tester" ||
		u.CreateTime != t0 || len(u.CrossProjectID) != 32 {
		t.Fatalf("created user = %+v, %v; want the sample's address, hash and name, created now", u, err)
	}
	// The volunteer can now attach by email and password (sample 20).
	if l := f.account(sampleURL(t, "20_lookup_account_GET.http")); l.Authenticator != r.Authenticator {
		t.Fatalf("lookup after create = %+v, want authenticator %s", l, r.Authenticator)
	}
	// Asked again (a lost reply): the same account.
	if again := f.account(sample); again.Authenticator != r.Authenticator {
		t.Fatalf("create repeated with the same password = %+v, want the same authenticator", again)
	}

	for _, tt := range []struct {
		name, url string
		errNum    int
	}{
		{"taken address, other password", "/create_account.php?email_addr=TESTER%40example.com&user_name=x&passwd_hash=" + passwd.ClientHash("other", sampleEmail), errDBNotUnique},
		{"bad address", "/create_account.php?email_addr=tester&user_name=x&passwd_hash=" + sampleHash, errBadEmailAddr},
		{"no address", "/create_account.php?user_name=x&passwd_hash=" + sampleHash, errBadEmailAddr},
		{"bad hash", "/create_account.php?email_addr=b%40example.com&user_name=x&passwd_hash=secret", errBadPasswd},
		{"no name", "/create_account.php?email_addr=b%40example.com&passwd_hash=" + sampleHash, errBadUserName},
		{"control character in name", "/create_account.php?email_addr=b%40example.com&user_name=a%00b&passwd_hash=" + sampleHash, errBadUserName},
	} {
		if r := f.account(tt.url); r.ErrorNum != tt.errNum || r.Authenticator != "" {
			t.Errorf("%s: GET %s = %+v, want error %d", tt.name, tt.url, r, tt.errNum)
		}
	}
	if n := f.count(); n != 1 {
		t.Fatalf("users = %d, want 1", n)
	}
	// Another volunteer, with team and consent parameters the client may add.
	r2 := f.account("/create_account.php?email_addr=B%40Example.com&passwd_hash=" + passwd.ClientHash("pw", "b@example.com") +
		"&user_name=Bee&team_name=T&consent_flag=1&source=boinc")
	if r2.Authenticator == "" || r2.Authenticator == r.Authenticator {
		t.Fatalf("second account = %+v, want a new authenticator", r2)
	}
	if u, err := f.st.UserGetByEmail(f.ctx, "b@example.com"); err != nil || u.Name != "Bee" {
		t.Fatalf("second account stored as %+v, %v; want address lowercased", u, err)
	}
}

func (f *accountsFixture) count() int {
	f.t.Helper()
	var n int
	if err := f.st.DB().GetContext(f.ctx, &n, `SELECT COUNT(*) FROM user`); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// brokenAccounts is a database that does not answer.
type brokenAccounts struct{}

func (brokenAccounts) UserGetByEmail(context.Context, string) (row.User, error) {
	return row.User{}, io.ErrUnexpectedEOF
}

func (brokenAccounts) UserCreate(context.Context, row.User) (int64, error) {
	return 0, io.ErrUnexpectedEOF
}

func (brokenAccounts) UserSetPasswdHash(context.Context, int64, string, string) (bool, error) {
	return false, io.ErrUnexpectedEOF
}

func (brokenAccounts) TeamGetByName(context.Context, string) (row.Team, error) {
	return row.Team{}, io.ErrUnexpectedEOF
}

func (brokenAccounts) UserSetTeam(context.Context, int64, int64) (int64, error) {
	return 0, io.ErrUnexpectedEOF
}

func TestAccountRPCsWithoutDatabaseOrByWrongMethod(t *testing.T) {
	t.Parallel()
	a, err := NewAccounts(AccountOptions{Store: brokenAccounts{}, URLBase: "http://127.0.0.1:8080", AccountCreation: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	for _, u := range []string{"/lookup_account.php?email_addr=a%40b.c&passwd_hash=" + sampleHash,
		"/create_account.php?email_addr=a%40b.com&user_name=a&passwd_hash=" + sampleHash} {
		resp, err := http.Get(srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf("<error_num>%d</error_num>", errProjectDown)) {
			t.Errorf("GET %s with the database down = %d %q, want error %d", u, resp.StatusCode, b, errProjectDown)
		}
	}
	resp, err := http.Post(srv.URL+"/lookup_account.php", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /lookup_account.php = %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/other.php")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other.php = %d, want 404", resp.StatusCode)
	}
	// The project config needs no database.
	resp, err = http.Get(srv.URL + "/get_project_config.php")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "<account_creation_disabled>0</account_creation_disabled>") {
		t.Errorf("project config = %q", b)
	}
}

// Accounts imported from a BOINC project log in from BOINC Manager with
// whichever hash form BOINC left in passwd_hash: the bcrypt form its PHP
// makes (password_hash of the client's md5, "$2y$"), kept as it is, or
// the legacy md5, upgraded on login; and, as BOINC's lookup_account
// allows, with the account key typed as the password, which leaves the
// stored password alone.
func TestLookupAccountWithBOINCHashes(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, false)
	const (
		auth = "0123456789abcdef0123456789abcdef"
		// md5("hunter2" + "imported@example.org"): what the client sends
		// for password hunter2.
		clientHash = "7c9ead3d5bceaf8d25a03811f160ba74"
		// PHP's password_hash(clientHash, PASSWORD_DEFAULT) form: made by
		// crypt(3)'s bcrypt (libxcrypt, the Openwall code PHP bundles)
		// with salt "abcdefghijklmnopqrstuu" at cost 10.
		phpHash = "$2y$10$abcdefghijklmnopqrstuufnFzCh7dv6DQaTKdljuYmFwlDGNaeNS"
		// md5(auth + "imported@example.org"): the account key typed as the
		// password.
		keyHash = "972b1a8fb484562e90fd72d49afb8e68"
		// md5(auth + "other@example.org"): the key hashed with another
		// address.
		otherKeyHash = "594f99da35de7891ca2407a3619d1fec"
	)
	imported := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "imported@example.org",
		Name: "imp", Authenticator: auth, PasswdHash: phpHash})
	legacy := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "legacy@example.org", Name: "leg",
		PasswdHash: passwd.ClientHash("hunter2", "legacy@example.org")})
	nopw := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "nopw@example.org", Name: "nopw"})

	for _, tt := range []struct {
		name, email, hash, auth string
	}{
		{"PHP bcrypt ($2y$) of the md5", "imported@example.org", clientHash, auth},
		{"PHP bcrypt, address in capitals", "Imported@Example.ORG", clientHash, auth},
		{"account key as the password", "imported@example.org", keyHash, auth},
		{"legacy md5", "legacy@example.org", passwd.ClientHash("hunter2", "legacy@example.org"), legacy.Authenticator},
		{"account key of an account without a password", "nopw@example.org",
			passwd.ClientHash(nopw.Authenticator, "nopw@example.org"), nopw.Authenticator},
		{"wrong password", "imported@example.org", passwd.ClientHash("hunter3", "imported@example.org"), ""},
		{"the stored bcrypt itself", "imported@example.org", phpHash, ""},
		{"account key hashed with another address", "imported@example.org", otherKeyHash, ""},
		{"another account's key", "legacy@example.org", keyHash, ""},
	} {
		r := f.account("/lookup_account.php?email_addr=" + url.QueryEscape(tt.email) + "&passwd_hash=" + url.QueryEscape(tt.hash))
		if r.Authenticator != tt.auth || (tt.auth == "") != (r.ErrorNum == errBadPasswd) {
			t.Errorf("%s: lookup_account(%s, %s) = %+v, want authenticator %q", tt.name, tt.email, tt.hash, r, tt.auth)
		}
	}
	if u, err := f.st.UserGet(f.ctx, imported.ID); err != nil || u.PasswdHash != phpHash {
		t.Errorf("PHP's bcrypt (cost 10, above the server's) became %q, %v; want it kept", u.PasswdHash, err)
	}
	u, err := f.st.UserGet(f.ctx, legacy.ID)
	if c, cerr := bcrypt.Cost([]byte(u.PasswdHash)); err != nil || cerr != nil || c != bcrypt.MinCost {
		t.Errorf("legacy md5 after a login = %q, %v; want bcrypt of the md5", u.PasswdHash, err)
	}
	if u, err := f.st.UserGet(f.ctx, nopw.ID); err != nil || u.PasswdHash != "" {
		t.Errorf("account without a password after logging in with its key: passwd_hash %q, %v; want still none", u.PasswdHash, err)
	}
}

// create_account's team_name joins the account to the team of that name
// (ignoring case) when it takes members, as BOINC's does, for a new
// account and for one the request finds with its password; an unknown or
// closed team leaves the account made and in no team.
func TestCreateAccountJoinsTeam(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, true)
	open := storetest.Team(t, f.st, storetest.TeamOptions{CreateTime: 1, Name: "Open Crunchers"})
	closed := storetest.Team(t, f.st, storetest.TeamOptions{CreateTime: 1, Name: "Closed Club", Closed: true})
	create := func(email, team string) row.User {
		t.Helper()
		q := url.Values{"email_addr": {email}, "passwd_hash": {passwd.ClientHash("secret123", email)},
			"user_name": {"vol"}, "team_name": {team}}
		if r := f.account("/create_account.php?" + q.Encode()); r.Authenticator == "" {
			t.Fatalf("create_account(%s, team %q) = %+v, want an account key", email, team, r)
		}
		u, err := f.st.UserGetByEmail(f.ctx, email)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tt := range []struct {
		email, team string
		want        int64
	}{
		{"a@example.org", "open crunchers", open.ID},
		{"b@example.org", "Closed Club", 0},
		{"c@example.org", "No Such Team", 0},
		{"d@example.org", "", 0},
		{"b@example.org", "Open Crunchers", open.ID}, // existing account, right password
	} {
		if u := create(tt.email, tt.team); u.TeamID != tt.want {
			t.Errorf("create_account(%s, team %q): teamid %d, want %d", tt.email, tt.team, u.TeamID, tt.want)
		}
	}
	if tm, err := f.st.TeamGet(f.ctx, open.ID); err != nil || tm.NUsers != 2 {
		t.Errorf("team %q: nusers %d, %v; want 2", open.Name, tm.NUsers, err)
	}
	if tm, err := f.st.TeamGet(f.ctx, closed.ID); err != nil || tm.NUsers != 0 {
		t.Errorf("team %q: nusers %d, %v; want 0", closed.Name, tm.NUsers, err)
	}
}
