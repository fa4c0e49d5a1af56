package scheduler

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
