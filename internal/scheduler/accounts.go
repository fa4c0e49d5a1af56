package scheduler

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// BOINC error numbers the account RPCs answer with (lib/error_numbers.h);
// the client and the Manager turn them into their own messages.
const (
	errDBNotUnique           = -137 // the email address is taken
	errNotImplemented        = -150
	errProjectDown           = -183
	errBadUserName           = -188
	errBadEmailAddr          = -205
	errBadPasswd             = -206
	errAcctCreationDisabled  = -208
	defaultMinPasswdLength   = 6
	defaultAccountRPCTimeout = 10 * time.Second
)

// Account RPC names (label values of account_rpcs_total).
const (
	rpcProjectConfig = "get_project_config"
	rpcLookupAccount = "lookup_account"
	rpcCreateAccount = "create_account"
)

// AccountStore is what the account RPCs need from the database;
// *store.Store is one.
type AccountStore interface {
	UserGetByEmail(ctx context.Context, email string) (row.User, error)
	UserCreate(ctx context.Context, u row.User) (int64, error)
	UserSetPasswdHash(ctx context.Context, id int64, old, hash string) (bool, error)
	TeamGetByName(ctx context.Context, name string) (row.Team, error)
	UserSetTeam(ctx context.Context, userID, teamID int64) (int64, error)
}

// AccountOptions configures the account RPCs. Store and URLBase are
// required.
type AccountOptions struct {
	Store AccountStore
	// Cache supplies the platforms get_project_config lists; nil lists
	// none.
	Cache CacheSource
	// URLBase is the public URL of the server; the master URL and the base
	// of these RPCs is URLBase + "/".
	URLBase     string
	ProjectName string
	// AccountCreation lets create_account make accounts. Off, volunteers
	// need an account the operator made (and its key or password).
	AccountCreation bool
	// MinPasswdLength is the shortest password the client lets a volunteer
	// choose; the server only ever sees its hash. Default 6.
	MinPasswdLength int
	// PasswdCost is the bcrypt work factor of the password hashes stored;
	// default passwd.DefaultCost (PHP's, as BOINC's web code stores them).
	PasswdCost int
	// Limit bounds password guessing; the zero value limits nothing (the
	// command's flags default to DefaultAccountLimit).
	Limit AccountLimit
	// Timeout bounds one request's database work; default 10s.
	Timeout    time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Accounts serves the web RPCs the client uses to find out about the
// project and to attach by email and password instead of by account key:
// get_project_config.php, lookup_account.php and create_account.php, at the
// master URL. Replies are XML, errors BOINC's <error> form with HTTP 200
// (the client reads the error number from the body). It is an
// http.Handler; the path's last element picks the RPC. Passwords are
// stored and checked by package passwd; guessing is bounded by the
// AccountLimit.
type Accounts struct {
	opts      AccountOptions
	masterURL string
	rpcs      *prometheus.CounterVec
	limit     *accountLimiter
}

// NewAccounts checks opts and returns the account RPC handler.
func NewAccounts(opts AccountOptions) (*Accounts, error) {
	if opts.Store == nil {
		return nil, errors.New("account options: no store")
	}
	base := strings.TrimRight(opts.URLBase, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("account options: URL base %q: want an absolute http or https URL", opts.URLBase)
	}
	if opts.MinPasswdLength <= 0 {
		opts.MinPasswdLength = defaultMinPasswdLength
	}
	if opts.PasswdCost == 0 {
		opts.PasswdCost = passwd.DefaultCost
	}
	if err := passwd.CheckCost(opts.PasswdCost); err != nil {
		return nil, fmt.Errorf("account options: %w", err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultAccountRPCTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	limit, err := newAccountLimiter(opts.Limit, opts.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Accounts{limit: limit, opts: opts, masterURL: base + "/",
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: "scheduler",
			Name: "account_rpcs_total",
			Help: "Account web RPCs (get_project_config, lookup_account, create_account) by outcome (ok, or the BOINC error number answered)."},
			[]string{"rpc", "outcome"})}
	for _, r := range []string{rpcProjectConfig, rpcLookupAccount, rpcCreateAccount} {
		a.rpcs.WithLabelValues(r, "ok")
	}
	if err := opts.Registerer.Register(a.rpcs); err != nil {
		return nil, fmt.Errorf("account metrics: %w", err)
	}
	return a, nil
}

// rpcError is an answer in BOINC's <error> form.
type rpcError struct {
	num int
	msg string
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d %s", e.num, e.msg) }

// ServeHTTP answers one account RPC.
func (a *Accounts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rpc := strings.TrimSuffix(path.Base(r.URL.Path), ".php")
	if rpc != rpcProjectConfig && rpc != rpcLookupAccount && rpc != rpcCreateAccount {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.Timeout)
	defer cancel()
	var reply any
	var err error
	outcome := "ok"
	switch rpc {
	case rpcProjectConfig:
		reply = a.projectConfig()
	case rpcLookupAccount, rpcCreateAccount:
		at, wait, scope := a.limit.begin(remoteIP(r), normalizeEmail(r.URL.Query().Get("email_addr")), a.opts.Now())
		if wait > 0 {
			outcome = outcomeLimited
			err = limitedError(scope, wait)
			break
		}
		if rpc == rpcLookupAccount {
			reply, err = a.lookupAccount(ctx, r)
		} else {
			reply, err = a.createAccount(ctx, r)
		}
		if err == nil {
			a.limit.succeeded(at)
		}
	}
	if err != nil {
		var re *rpcError
		if !errors.As(err, &re) {
			a.opts.Logger.Error("account rpc failed", "rpc", rpc, "error", err)
			re = &rpcError{errProjectDown, "The project's database is unavailable; try again later."}
		}
		if outcome != outcomeLimited {
			outcome = fmt.Sprint(re.num)
		}
		reply = errorReply{Num: re.num, Msg: re.msg}
	}
	a.rpcs.WithLabelValues(rpc, outcome).Inc()
	a.opts.Logger.Debug("account rpc", "rpc", rpc, "outcome", outcome)
	var buf bytes.Buffer
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "    ")
	if err := enc.Encode(reply); err != nil {
		a.opts.Logger.Error("write account rpc reply", "rpc", rpc, "error", err)
		http.Error(w, "internal error writing the reply", http.StatusInternalServerError)
		return
	}
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// outcomeLimited is the account_rpcs_total outcome of a request refused
// by the account limit.
const outcomeLimited = "limited"

// limitedError is the answer to a request refused by the account limit:
// ERR_PROJECT_DOWN, after which the Manager shows the message and does
// not retry on its own (ERR_RETRY would make it ask again every half
// second). The message is the same whether or not the address has an
// account.
func limitedError(scope string, wait time.Duration) error {
	who := "your network address"
	if scope == limitScopeEmail {
		who = "this e-mail address"
	}
	return &rpcError{errProjectDown, fmt.Sprintf("Too many failed attempts to log in from %s; try again in %s.",
		who, roundUp(wait))}
}

// roundUp is a wait as a person reads it: whole minutes, or seconds under
// a minute.
func roundUp(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d seconds", int((d+time.Second-1)/time.Second))
	}
	m := int((d + time.Minute - 1) / time.Minute)
	if m == 1 {
		return "1 minute"
	}
	return fmt.Sprintf("%d minutes", m)
}

type errorReply struct {
	XMLName xml.Name `xml:"error"`
	Num     int      `xml:"error_num"`
	Msg     string   `xml:"error_msg"`
}

// projectConfigReply is <project_config>. Flags are written 0/1, which the
// client reads as it reads the empty-element form.
type projectConfigReply struct {
	XMLName                       xml.Name          `xml:"project_config"`
	Name                          string            `xml:"name"`
	MasterURL                     string            `xml:"master_url"`
	WebRPCURLBase                 string            `xml:"web_rpc_url_base"`
	MinPasswdLength               int               `xml:"min_passwd_length"`
	UsesUsername                  int               `xml:"uses_username"`
	AccountCreationDisabled       int               `xml:"account_creation_disabled"`
	ClientAccountCreationDisabled int               `xml:"client_account_creation_disabled"`
	WebStopped                    int               `xml:"web_stopped"`
	SchedStopped                  int               `xml:"sched_stopped"`
	Platforms                     []projectPlatform `xml:"platforms>platform"`
}

type projectPlatform struct {
	Name             string `xml:"platform_name"`
	UserFriendlyName string `xml:"user_friendly_name"`
	PlanClass        string `xml:"plan_class,omitempty"`
}

func (a *Accounts) projectConfig() projectConfigReply {
	disabled := 1
	if a.opts.AccountCreation {
		disabled = 0
	}
	return projectConfigReply{
		Name:                          a.opts.ProjectName,
		MasterURL:                     a.masterURL,
		WebRPCURLBase:                 a.masterURL,
		MinPasswdLength:               a.opts.MinPasswdLength,
		AccountCreationDisabled:       disabled,
		ClientAccountCreationDisabled: disabled,
		Platforms:                     a.platforms(),
	}
}

// platforms lists the platforms (and plan classes) the project has a usable
// app version for, from the tables the feeder publishes: what the Manager
// checks a computer against before attaching it.
func (a *Accounts) platforms() []projectPlatform {
	if a.opts.Cache == nil {
		return nil
	}
	c, err := a.opts.Cache.Current()
	if err != nil {
		return nil
	}
	t, _, err := c.Tables()
	if err != nil {
		return nil
	}
	plats := map[int64]row.Platform{}
	for _, p := range t.Platforms {
		if !p.Deprecated {
			plats[p.ID] = p
		}
	}
	apps := map[int64]bool{}
	for _, ap := range t.Apps {
		if !ap.Deprecated {
			apps[ap.ID] = true
		}
	}
	seen := map[projectPlatform]bool{}
	var out []projectPlatform
	for _, v := range t.AppVersions {
		p, ok := plats[v.PlatformID]
		if !ok || v.Deprecated || !apps[v.AppID] {
			continue
		}
		pp := projectPlatform{Name: p.Name, UserFriendlyName: p.UserFriendlyName, PlanClass: v.PlanClass}
		if !seen[pp] {
			seen[pp] = true
			out = append(out, pp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].PlanClass < out[j].PlanClass
	})
	return out
}

// accountOut is <account_out> with the account key.
type accountOut struct {
	XMLName       xml.Name `xml:"account_out"`
	Authenticator string   `xml:"authenticator"`
}

// errLogin answers every lookup that does not log in: a wrong password, no
// password (BOINC answers that with whether the address has an account),
// an account without a password, and an address with no account. One
// answer for all, so nobody learns which addresses have accounts.
var errLogin = &rpcError{errBadPasswd, "Wrong e-mail address or password."}

// lookupAccount answers lookup_account.php?email_addr=E&passwd_hash=H with
// the account key of the account with address E if H is its password hash.
func (a *Accounts) lookupAccount(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if q.Get("ldap_auth") != "" || q.Get("server_assigned_cookie") != "" {
		return nil, &rpcError{errNotImplemented, "This project supports only lookups by email address and password."}
	}
	email := normalizeEmail(q.Get("email_addr"))
	given := q.Get("passwd_hash")
	var u row.User
	found := false
	if email != "" && len(email) <= 254 && utf8.ValidString(email) {
		var err error
		u, err = a.opts.Store.UserGetByEmail(ctx, email)
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	// Checked even when there is no account (against nothing), so the time
	// taken does not tell.
	ok, rehash := passwd.Check(u.PasswdHash, given, a.opts.PasswdCost)
	if found && !ok && passwd.CheckAccountKey(u.Authenticator, u.EmailAddr, given) {
		// The account key typed as the password, as BOINC accepts it;
		// the stored password, if any, stays as it is.
		ok, rehash = true, false
	}
	if !found || !ok {
		return nil, errLogin
	}
	if rehash {
		a.upgradePasswdHash(ctx, u, given)
	}
	return accountOut{Authenticator: u.Authenticator}, nil
}

// upgradePasswdHash replaces a legacy (md5) or weaker stored hash after a
// login that proved the password, as BOINC does. A failure is only logged:
// the login stands and the next one tries again.
func (a *Accounts) upgradePasswdHash(ctx context.Context, u row.User, given string) {
	h, err := passwd.Hash(given, a.opts.PasswdCost)
	if err == nil {
		// Not written if the row changed meanwhile (a new password).
		_, err = a.opts.Store.UserSetPasswdHash(ctx, u.ID, u.PasswdHash, h)
	}
	if err != nil {
		a.opts.Logger.Warn("upgrade stored password hash", "user_id", u.ID, "error", err)
	}
}

// createAccount answers
// create_account.php?email_addr=E&passwd_hash=H&user_name=N[&team_name=T...]
// with the new account's key. An address already registered with the same
// password hash gets that account's key, as BOINC does: a client whose
// first reply was lost can ask again. With another hash it is an error.
// Either way the account then joins team T if a team of that name exists
// and takes members (joinTeam).
func (a *Accounts) createAccount(ctx context.Context, r *http.Request) (any, error) {
	u, err := a.createOrFind(ctx, r)
	if err != nil {
		return nil, err
	}
	a.joinTeam(ctx, u, strings.TrimSpace(r.URL.Query().Get("team_name")))
	return accountOut{Authenticator: u.Authenticator}, nil
}

// joinTeam puts user u in the team called name, as BOINC's
// create_account does after making or finding the account: only if the
// team exists and takes members, and without an error to the client
// otherwise (the account stands; the volunteer can still join another
// way). A database failure is logged.
func (a *Accounts) joinTeam(ctx context.Context, u row.User, name string) {
	if name == "" || len(name) > 254 || !utf8.ValidString(name) {
		return
	}
	t, err := a.opts.Store.TeamGetByName(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.opts.Logger.Debug("create_account names no team", "user_id", u.ID)
		return
	case err != nil:
		a.opts.Logger.Warn("create_account: find the team to join", "user_id", u.ID, "error", err)
		return
	case t.ID == u.TeamID:
		return
	}
	_, err = a.opts.Store.UserSetTeam(ctx, u.ID, t.ID)
	switch {
	case errors.Is(err, store.ErrTeamClosed):
		a.opts.Logger.Debug("create_account names a team that takes no members", "user_id", u.ID, "team_id", t.ID)
	case err != nil:
		a.opts.Logger.Warn("create_account: join team", "user_id", u.ID, "team_id", t.ID, "error", err)
	default:
		a.opts.Logger.Info("user joined team", "user_id", u.ID, "team_id", t.ID)
	}
}

// createOrFind makes the account create_account asks for, or finds the
// one already there with the same password.
func (a *Accounts) createOrFind(ctx context.Context, r *http.Request) (row.User, error) {
	if !a.opts.AccountCreation {
		return row.User{}, &rpcError{errAcctCreationDisabled, "This project does not create accounts here; ask its operator for one."}
	}
	q := r.URL.Query()
	email := normalizeEmail(q.Get("email_addr"))
	if !validEmail(email) {
		return row.User{}, &rpcError{errBadEmailAddr, "Invalid email address."}
	}
	hash := strings.ToLower(strings.TrimSpace(q.Get("passwd_hash")))
	if !passwd.IsClientHash(hash) {
		return row.User{}, &rpcError{errBadPasswd, "Invalid password hash."}
	}
	name := strings.TrimSpace(q.Get("user_name"))
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > 254 || strings.ContainsFunc(name, unicode.IsControl) {
		return row.User{}, &rpcError{errBadUserName, "Invalid user name."}
	}
	existing, err := a.opts.Store.UserGetByEmail(ctx, email)
	switch {
	case err == nil:
		return a.existingAccount(ctx, existing, hash)
	case !errors.Is(err, store.ErrNotFound):
		return row.User{}, err
	}
	auth, err := randomHex(16)
	if err != nil {
		return row.User{}, err
	}
	cpid, err := randomHex(16)
	if err != nil {
		return row.User{}, err
	}
	stored, err := passwd.Hash(hash, a.opts.PasswdCost)
	if err != nil {
		return row.User{}, err
	}
	u := row.User{CreateTime: a.opts.Now().Unix(), EmailAddr: email, Name: name, Authenticator: auth,
		PasswdHash: stored, CrossProjectID: cpid}
	u.ID, err = a.opts.Store.UserCreate(ctx, u)
	if errors.Is(err, store.ErrDuplicate) {
		// Created by a concurrent request a moment ago.
		existing, err := a.opts.Store.UserGetByEmail(ctx, email)
		if err != nil {
			return row.User{}, err
		}
		return a.existingAccount(ctx, existing, hash)
	}
	if err != nil {
		return row.User{}, err
	}
	a.opts.Logger.Info("account created", "user_id", u.ID)
	return u, nil
}

// existingAccount is create_account for an address already registered:
// the account, if hash is its password.
func (a *Accounts) existingAccount(ctx context.Context, u row.User, hash string) (row.User, error) {
	ok, rehash := passwd.Check(u.PasswdHash, hash, a.opts.PasswdCost)
	if !ok {
		return row.User{}, &rpcError{errDBNotUnique, "An account with that email address already exists."}
	}
	if rehash {
		a.upgradePasswdHash(ctx, u, hash)
	}
	return u, nil
}

// normalizeEmail is the address as stored: the client lowercases it
// before hashing the password with it, so the server must too.
func normalizeEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// validEmail is a plausibility check, not RFC 5322: one @ with something
// on both sides, a dot in the domain, no spaces or control characters.
func validEmail(s string) bool {
	if len(s) < 5 || len(s) > 254 || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}) {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && !strings.Contains(domain, "@") && strings.Contains(strings.Trim(domain, "."), ".")
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
