package scheduler

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/clientaddr"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the scheduler needs from the database; *store.Store is one.
type Store interface {
	HostGetByCPID(ctx context.Context, userID int64, cpid string) (row.Host, error)
	HostInsert(ctx context.Context, h row.Host) (int64, error)
	ResultListReported(ctx context.Context, names []string) ([]store.ReportedResult, error)
	ResultListByIDs(ctx context.Context, ids []int64) ([]row.Result, error)
	ResultListByNames(ctx context.Context, names []string) ([]store.ResultByName, error)
	ResultListHostInProgress(ctx context.Context, hostID int64, limit int) ([]store.HostResult, error)
	HostAppVersionListByHost(ctx context.Context, hostID int64) ([]row.HostAppVersion, error)
	ResultDetachHost(ctx context.Context, hostID, now int64) (int, error)
	SchedulerCommit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error)
	UserHostGet(ctx context.Context, auth string, hostID int64) (store.UserHostHeld, error)
	UserHostHeldGet(ctx context.Context, auth string, hostID int64, limit int) (store.UserHostHeld, error)
	UserHostHeldList(ctx context.Context, keys []store.AuthHost, limit int) ([]store.UserHostHeld, error)
	WorkunitListByIDs(ctx context.Context, ids []int64) ([]row.Workunit, error)
	MsgFromHostInsert(ctx context.Context, msgs []row.MsgFromHost) (int64, error)
	MsgToHostTake(ctx context.Context, hostID int64, limit int) ([]row.MsgToHost, error)
}

// DefaultUploadGrace is --upload-grace's default.
const DefaultUploadGrace = time.Hour

// UploadGraceFromFlag reads an --upload-grace flag as the scheduler and the
// file deleter both read theirs, which must match: 0 is the default,
// negative is none. The result is Config.UploadGrace.
func UploadGraceFromFlag(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultUploadGrace
	case d < 0:
		return 0
	}
	return d
}

// Config is the scheduler's configuration; each setting has the rules of
// its flag.
type Config struct {
	// URLBase is the public URL of this server, e.g. http://host:8080:
	// downloads are under URLBase/download/, uploads go to
	// URLBase/file_upload_handler (--url-base; the program puts the
	// address it bound in place of an empty one).
	URLBase string
	// Fanout is the download and upload directories' fan-out (--fanout).
	Fanout int
	// UploadDir is where the data server stores uploaded outputs
	// (--upload-dir). A result reported as a success counts as one only if
	// its output files are there, finished (package outputfile), at the
	// size reported (the client reports success even after an upload
	// failed for good); and every output of a reported result is closed, so
	// its upload certificate writes nothing more. Empty skips both.
	UploadDir string
	// UploadGrace is how long after an instance's report deadline its
	// upload certificates still authorise an upload: a result a little late
	// is still a result; 0 is none. The expiry bounds how long a
	// certificate can be used once its result is over
	// (keys.UploadCertificate). The program reads --upload-grace with
	// UploadGraceFromFlag.
	UploadGrace time.Duration
	// NextRPCDelay makes clients contact the scheduler again after this
	// long even when they need nothing; 0 sends none (--next-rpc-delay).
	NextRPCDelay time.Duration
	// ReportImmediately marks every sent result <report_immediately/>, so
	// the client reports it as soon as it is uploaded instead of with its
	// next work request or up to an hour later (--report-immediately).
	ReportImmediately bool
	// ProjectName is shown by clients; empty sends none (--project-name).
	ProjectName string
	// RequestDelay is the least time a client waits before its next RPC
	// (--request-delay).
	RequestDelay time.Duration
	// MaxResultsPerRPC bounds new results per reply (--max-results-per-rpc).
	MaxResultsPerRPC int
	// MaxInProgressPerCPU bounds the CPU tasks a host holds, per CPU it
	// has (no more than the volunteer's <max_cpus>)
	// (--max-in-progress-per-cpu; BOINC's max_wus_in_progress).
	MaxInProgressPerCPU int
	// MaxInProgressPerGPU bounds the tasks a host holds for each GPU type,
	// per GPU of that type; 0 is no limit (--max-in-progress-per-gpu;
	// BOINC's max_wus_in_progress_gpu).
	MaxInProgressPerGPU int
	// AppMaxInProgress bounds the tasks of an app (by name) a host holds,
	// whatever their resource (--app-max-in-progress NAME=N; BOINC's
	// <max_jobs_in_progress><app>).
	AppMaxInProgress map[string]int
	// ARTrustValid is how many valid results in a row (and no error since)
	// make a host trusted by adaptive replication, and one of the tests of
	// a reliable host (reliable-only instances) (--ar-trust-valid).
	ARTrustValid int
	// ARSpotCheck is the least probability, in [0, 1], that a job of an
	// adaptive replication app sent to a trusted host is replicated anyway;
	// 0 never spot-checks (--ar-spot-check).
	ARSpotCheck float64
	// QuarantineStreak is the error streak (error or invalid results in a
	// row) at which a host is quarantined: one task at a time, no
	// reliable-only tasks, never trusted; 0 turns quarantine off
	// (--quarantine-streak).
	QuarantineStreak int
	// DailyResultQuota is the jobs of one app version a host may get a
	// day, per CPU for a CPU version and per GPU for a GPU version
	// (BOINC's daily_result_quota): each host's own quota
	// (host_app_version.max_jobs_per_day) starts at it, shrinks by one per
	// reported error down to 1 and doubles back on valid results
	// (package hostav). 0 turns the daily quota off, as in BOINC; the flag's
	// default, 500, is what BOINC's make_project writes
	// (--daily-result-quota).
	DailyResultQuota int
	// GPUQuotaMultiplier multiplies the daily quota of a GPU version per
	// GPU (BOINC's gpu_multiplier): a GPU runs many jobs in a CPU's time.
	// 0 means 1 (--gpu-quota-multiplier).
	GPUQuotaMultiplier int
	// MaxBodyBytes bounds a request body (--max-body-bytes). Memory does not
	// grow with it: the parser holds at most its limits' worth of reports.
	MaxBodyBytes int64
	// Timeout bounds the handling of one request; 0 means 30s (no flag).
	Timeout time.Duration
	// RateLimit bounds requests per host and per address; the zero value
	// limits nothing (the --rate-limit-* flags).
	RateLimit RateLimit
	// CommitLanes is how many group commits may run at once
	// (--commit-lanes).
	CommitLanes int
	// TrickleDown puts the trickle-down messages queued for the host
	// (msg_to_host) in each reply, which costs a read per request
	// (--trickle-down).
	TrickleDown bool
	// PlanClasses are the project's plan classes (--plan-class-spec, read
	// once at start); nil is none, and then no version with a plan class
	// is sent.
	PlanClasses *planclass.Specs
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URLBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--url-base %q: want an absolute http or https URL", c.URLBase))
	}
	if err := config.CheckFanout(c.Fanout); err != nil {
		errs = append(errs, err)
	}
	if c.UploadGrace < 0 {
		errs = append(errs, fmt.Errorf("--upload-grace %s: want 0 (none) or a positive duration", c.UploadGrace))
	}
	if c.NextRPCDelay < 0 {
		errs = append(errs, fmt.Errorf("--next-rpc-delay %s: want 0 or a positive duration", c.NextRPCDelay))
	}
	if c.RequestDelay <= 0 {
		errs = append(errs, fmt.Errorf("--request-delay %s: want a positive duration", c.RequestDelay))
	}
	for _, f := range []struct {
		flag string
		n    int
	}{{"max-results-per-rpc", c.MaxResultsPerRPC}, {"max-in-progress-per-cpu", c.MaxInProgressPerCPU},
		{"ar-trust-valid", c.ARTrustValid}, {"commit-lanes", c.CommitLanes}} {
		if f.n < 1 {
			errs = append(errs, fmt.Errorf("--%s %d: want at least 1", f.flag, f.n))
		}
	}
	if !(c.ARSpotCheck >= 0 && c.ARSpotCheck <= 1) {
		errs = append(errs, fmt.Errorf("--ar-spot-check %v: want a probability between 0 and 1", c.ARSpotCheck))
	}
	if c.DailyResultQuota < 0 {
		errs = append(errs, fmt.Errorf("--daily-result-quota %d: want 0 (off) or more", c.DailyResultQuota))
	}
	if c.GPUQuotaMultiplier < 0 {
		errs = append(errs, fmt.Errorf("--gpu-quota-multiplier %d: want 1 or more", c.GPUQuotaMultiplier))
	}
	if c.MaxInProgressPerGPU < 0 {
		errs = append(errs, fmt.Errorf("--max-in-progress-per-gpu %d: want 0 (no limit) or more", c.MaxInProgressPerGPU))
	}
	for name, n := range c.AppMaxInProgress {
		if name == "" || n < 1 {
			errs = append(errs, fmt.Errorf("--app-max-in-progress %s=%d: want APP=N with N at least 1", name, n))
		}
	}
	if c.QuarantineStreak < 0 {
		errs = append(errs, fmt.Errorf("--quarantine-streak %d: want 0 (off) or more", c.QuarantineStreak))
	}
	if c.MaxBodyBytes < 4096 {
		errs = append(errs, fmt.Errorf("--max-body-bytes %d: want at least 4096", c.MaxBodyBytes))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s: want 0 (the default) or a positive duration", c.Timeout))
	}
	errs = append(errs, c.RateLimit.problems()...)
	return errors.Join(errs...)
}

// Deps are the scheduler's collaborators: the database, the cache, and the
// keys the program read from its key files.
type Deps struct {
	Store Store
	Cache CacheSource
	// UploadKey signs the upload certificate of every output file sent; the
	// data server checks it with the public half.
	UploadKey *rsa.PrivateKey
	// UploadCertKey, when set, signs upload certificates instead of
	// UploadKey: an Ed25519 signature costs a small fraction of an RSA one,
	// and only our data server checks certificates (package keys).
	UploadCertKey ed25519.PrivateKey
	// CodeSignKey is the project's code-signing public key in BOINC text
	// form, sent to clients that do not have one yet; empty sends none.
	CodeSignKey string
	// CodeSignKeySignature is CodeSignKey's text signed with the previous
	// code-signing private key (taskctl keys rotate). With it, clients that
	// hold the previous key are sent the new one; empty sends them nothing.
	CodeSignKeySignature string
	Log                  *slog.Logger     // nil: discard
	Metrics              *Metrics         // nil: registered nowhere
	Now                  func() time.Time // nil: time.Now
	// Rand draws adaptive replication's spot checks, uniform in [0, 1);
	// nil means math/rand/v2's Float64.
	Rand func() float64
	// ClaimerPID is recorded in claimed cache slots so the feeder can
	// reclaim the claims of a dead scheduler; 0 means os.Getpid().
	ClaimerPID int32
}

// badAuthDelay is the request_delay for an unknown account key: long, as in
// BOINC, so a misconfigured client does not hammer the database.
const badAuthDelay = time.Hour

// maxInProgressListed bounds the in-progress results read per request.
const maxInProgressListed = 1000

// Service handles scheduler RPCs. It is an http.Handler.
type Service struct {
	opts      Config
	deps      Deps
	st        Store
	log       *slog.Logger
	m         *Metrics
	now       func() time.Time
	uploadURL string
	masterURL string // URLBase + "/": the URL volunteers attach to
	download  string // URL prefix of input files, ending in "/"
	catalog   catalogCache
	read      *reader
	commit    *committer
	limit     *rateLimiter // nil: no rate limits
}

// New returns a scheduler.
func New(cfg Config, deps Deps) (*Service, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Store == nil {
		errs = append(errs, errors.New("scheduler: no store"))
	}
	if deps.Cache == nil {
		errs = append(errs, errors.New("scheduler: no cache"))
	}
	if deps.UploadKey == nil && deps.UploadCertKey == nil {
		errs = append(errs, errors.New("scheduler: no upload key"))
	} else if deps.UploadCertKey != nil && len(deps.UploadCertKey) != ed25519.PrivateKeySize {
		errs = append(errs, fmt.Errorf("scheduler: upload certificate key is %d bytes, want %d", len(deps.UploadCertKey), ed25519.PrivateKeySize))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if deps.Rand == nil {
		deps.Rand = rand.Float64
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.ClaimerPID == 0 {
		deps.ClaimerPID = int32(os.Getpid())
	}
	base := strings.TrimRight(cfg.URLBase, "/")
	m := deps.Metrics
	limit, err := newRateLimiter(cfg.RateLimit, m.reg)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return &Service{
		limit:     limit,
		opts:      cfg,
		deps:      deps,
		st:        deps.Store,
		log:       deps.Log,
		m:         m,
		now:       deps.Now,
		uploadURL: base + "/file_upload_handler",
		masterURL: base + "/",
		download:  base + "/download/",
		catalog:   catalogCache{log: deps.Log, plans: cfg.PlanClasses},
		read:      newReader(deps.Store, cfg.Timeout, m),
		commit:    newCommitter(deps.Store, cfg.Timeout, cfg.CommitLanes, m, deps.Now),
	}, nil
}

// Flush writes the jobs sent that the scheduler counts in memory only (the
// daily quota's counts, written about once a second with the requests'
// commits). Call it after the last request, before the process ends.
func (s *Service) Flush(ctx context.Context) error {
	if err := s.commit.flush(ctx, s.st); err != nil {
		return fmt.Errorf("scheduler: write the jobs sent today: %w", err)
	}
	return nil
}

// errUnavailable marks a request the database could not serve: HTTP 503.
var errUnavailable = errors.New("database unavailable")

// ServeHTTP answers one scheduler RPC.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	outcome := outcomeOK
	defer func() {
		s.m.requests.WithLabelValues(outcome).Inc()
		s.m.duration.Observe(time.Since(start).Seconds())
	}()
	if r.Method != http.MethodPost {
		outcome = outcomeBadRequest
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "the scheduler takes a POSTed <scheduler_request>", http.StatusMethodNotAllowed)
		return
	}
	// A flood from one address is turned away before its body is read.
	if wait := s.limit.allowAddr(remoteIP(r), s.now()); wait > 0 {
		outcome = outcomeRateLimited
		s.writeRateLimited(w, wait)
		return
	}
	// The client labels its body form-encoded; it is raw XML and is read as
	// such, never form-decoded.
	head := &headRecorder{r: r.Body}
	lim := protocol.DefaultLimits()
	lim.MaxBytes = s.opts.MaxBodyBytes
	lim.MaxStderrBytes = maxBlob
	req, err := protocol.ParseSchedulerRequestLimits(head, lim)
	if err != nil {
		outcome = s.refuse(w, r, head, err)
		return
	}
	if req.ReportsLeft > 0 {
		s.log.Info("request reports more than is read at once; the rest are not acked and come again",
			"host_id", req.HostID, "remote_addr", remoteIP(r), "reports_read", len(req.Results), "reports_left", req.ReportsLeft)
	}
	if wait := s.limit.allowHost(remoteIP(r), req.HostID, req.Authenticator, s.now()); wait > 0 {
		outcome = outcomeRateLimited
		s.writeRateLimited(w, wait)
		return
	}
	// Finish what was started even if the client hangs up: every step is
	// its own transaction, but a claim half made is a claim wasted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.Timeout)
	defer cancel()
	reply, badAuth, err := s.Handle(ctx, req, remoteIP(r))
	if err != nil {
		outcome = outcomeUnavailable
		s.log.Error("scheduler request failed", "error", err)
		w.Header().Set("Retry-After", "60")
		http.Error(w, "the project's database is unavailable; try again later", http.StatusServiceUnavailable)
		return
	}
	if badAuth {
		outcome = outcomeBadAuthenticator
	}
	buf := replyBufs.Get().(*bytes.Buffer)
	defer putReplyBuf(buf)
	if err := protocol.WriteSchedulerReply(buf, reply); err != nil {
		// The reply may carry acks and sent work; both are recorded and
		// will be acked or resent on the next request.
		outcome = outcomeUnavailable
		s.log.Error("write scheduler reply", "error", err)
		http.Error(w, "internal error writing the reply", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// replyBufs holds the buffers replies are written into before they are
// sent (so that a failure to write one is still a clean error): grown anew
// for every request they were a tenth of the scheduler's allocation.
var replyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putReplyBuf returns buf to replyBufs, unless a reply that carried a great
// many tasks grew it past what most replies need.
func putReplyBuf(buf *bytes.Buffer) {
	if buf.Cap() > 1<<20 {
		return
	}
	buf.Reset()
	replyBufs.Put(buf)
}

// remoteIP is the client's address: the TCP peer's, or the one a trusted
// reverse proxy forwarded (clientaddr.Proxies.Handler, in front of the
// public server).
func remoteIP(r *http.Request) string { return clientaddr.From(r) }

// rpc is the state of one request being handled.
type rpc struct {
	req      *protocol.SchedulerRequest
	reply    *protocol.SchedulerReply
	now      int64
	user     row.User
	teamName string // the user's team's, read with the user; "" for none
	host     row.Host
	reported map[string]bool // names reported in this request
	dbErr    bool            // a database step failed: send no new work
	// held is the host's instances in progress by name, read once for
	// reports, aborts and resends.
	held map[string]store.HostResult
	// preHeld is the instances in progress on host preHeldOf, read with
	// the user: held when that host turns out to be the request's.
	preHeld   []store.HostResult
	preHeldOf int64
	// preHAV is host preHeldOf's host_app_version rows, read with preHeld.
	preHAV []row.HostAppVersion
	// noTrickleDownsOf is the host that the account's read found without
	// trickle-down messages waiting (0: not known), so that delivering
	// them costs that host no read of its own.
	noTrickleDownsOf int64
	// havs is the request's host's host_app_version rows once
	// hostAppVersions has them (havsRead).
	havs     []row.HostAppVersion
	havsRead bool
	// The request's writes, committed with its first sends.
	reports   []pendingReport
	hostWrite *store.SchedHost
	committed bool
	// sentRows and sentJobs are the instances sent in this request and
	// their jobs, as the commit left them: the reply describes them without
	// reading them again.
	sentRows map[int64]row.Result
	sentJobs map[int64]row.Workunit
	// rsc are the host's resources, the CPU first (choice.rsc).
	rsc []protocol.Coproc
}

// Handle answers a parsed request. badAuth reports an unknown account key
// (the reply then says so). An error means the database could not be used
// and nothing should be sent but HTTP 503.
func (s *Service) Handle(ctx context.Context, req *protocol.SchedulerRequest, ip string) (reply *protocol.SchedulerReply, badAuth bool, err error) {
	now := s.now()
	x := &rpc{req: req, now: now.Unix(), reported: map[string]bool{},
		reply: &protocol.SchedulerReply{ProjectName: s.opts.ProjectName}}

	user, hostRow, hostFound, ok, err := s.authenticate(ctx, x)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		x.reply.Messages = append(x.reply.Messages, protocol.Message{Priority: "notice",
			Text: "Invalid or missing account key.  To fix, remove and add this project."})
		x.reply.RequestDelay = badAuthDelay.Seconds()
		return x.reply, true, nil
	}
	x.user = user
	if err := s.recordHost(ctx, x, ip, hostRow, hostFound); err != nil {
		return nil, false, err
	}
	x.reply.RequestDelay = s.opts.RequestDelay.Seconds()
	x.reply.NextRPCDelay = s.opts.NextRPCDelay.Seconds()
	// The client checks master_url against the URL it attached to.
	x.reply.MasterURL = s.masterURL
	x.reply.UserID = user.ID
	x.reply.UserName = user.Name
	x.reply.UserTotalCredit = user.TotalCredit
	x.reply.UserExpavgCredit = user.ExpavgCredit
	x.reply.UserCreateTime = user.CreateTime
	x.reply.EmailHash, x.reply.CrossProjectID, x.reply.ExternalCPID = crossProjectIDs(user)
	// As BOINC's scheduler: the team's id and name when the user is in a
	// team that exists, else an empty name, which clears the one the
	// client shows (it keeps a name it is not sent).
	x.reply.HasTeamName = true
	if x.teamName != "" {
		x.reply.TeamID, x.reply.TeamName = user.TeamID, x.teamName
	}
	x.reply.HostTotalCredit = x.host.TotalCredit
	x.reply.HostExpavgCredit = x.host.ExpavgCredit
	x.reply.HostCreateTime = x.host.CreateTime
	x.reply.ProjectPreferences.Inner = replyPrefs(user)
	s.addCodeSignKey(x)

	if err := s.listHeld(ctx, x); err != nil {
		return nil, false, err
	}
	s.prepareReports(ctx, x)
	s.abortUnneeded(ctx, x)
	if err := s.sendWork(ctx, x); err != nil {
		return nil, false, err
	}
	if !x.committed {
		if _, err := s.commitRound(ctx, x, nil); err != nil {
			return nil, false, err
		}
	}
	s.storeTrickleUps(ctx, x)
	s.deliverTrickleDowns(ctx, x)
	if s.opts.ReportImmediately {
		for i := range x.reply.Results {
			x.reply.Results[i].ReportImmediately = &protocol.Empty{}
		}
	}
	s.log.Debug("scheduler request", "host_id", x.host.ID, "user_id", x.user.ID, "reported", len(req.Results),
		"acked", len(x.reply.ResultAcks), "aborted", len(x.reply.ResultAborts)+len(x.reply.ResultAbortsINS), "results", len(x.reply.Results), "work_req_seconds", req.WorkReqSeconds)
	return x.reply, false, nil
}

// authenticate finds the user whose account key is the request's, and the
// host row its hostid names whoever owns it, in one read shared with the
// concurrent requests (reader); when the request needs the host's
// instances in progress (listHeld), the same read has them. The lookup goes
// through the unique index; the final comparison is exact (the column's
// collation may ignore case) and in constant time.
func (s *Service) authenticate(ctx context.Context, x *rpc) (u row.User, h row.Host, hostFound, ok bool, err error) {
	auth := strings.TrimSpace(x.req.Authenticator)
	if auth == "" || len(auth) > 254 || !utf8.ValidString(auth) {
		return u, h, false, false, nil
	}
	hostID := max(x.req.HostID, 0)
	wantHeld := hostID > 0 && needsHeld(x.req)
	f, err := s.read.read(ctx, store.AuthHost{Auth: auth, HostID: hostID, WantHeld: wantHeld})
	u, h, hostFound = f.User, f.Host, f.HostFound
	if err == nil && wantHeld {
		x.preHeld, x.preHeldOf, x.preHAV = f.Held, hostID, f.HostAppVersions
	}
	if err == nil && f.HostFound && !f.TrickleDownQueued {
		x.noTrickleDownsOf = hostID
	}
	if errors.Is(err, store.ErrNotFound) {
		return u, h, false, false, nil
	}
	if err != nil {
		return u, h, false, false, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if subtle.ConstantTimeCompare([]byte(u.Authenticator), []byte(auth)) != 1 {
		x.preHeld, x.preHeldOf, x.preHAV, x.noTrickleDownsOf = nil, 0, nil, 0
		return row.User{}, row.Host{}, false, false, nil
	}
	x.teamName = f.TeamName
	return u, h, hostFound, true, nil
}

// text makes a client's string storable in a VARCHAR(254) column: valid
// UTF-8 (a strict server refuses anything else, and the host could then
// never be updated) of at most 254 characters.
func text(s string) string {
	return clip(strings.ToValidUTF8(s, "\uFFFD"), 254)
}

// maxPFeatures is host.p_features's size (BOINC's P_FEATURES_SIZE).
const maxPFeatures = 1024

// features is a p_features that fits its column: whole words only, since
// a plan class tests whole features and a cut one would be a different
// feature.
func features(s string) string {
	f := strings.Join(strings.Fields(strings.ToValidUTF8(s, "")), " ")
	if len(f) <= maxPFeatures {
		return f
	}
	f = f[:maxPFeatures+1]
	return f[:max(strings.LastIndexByte(f, ' '), 0)]
}

// maxCoprocKinds bounds the coprocessor kinds stored for a host (BOINC's
// MAX_RSC less the CPU): the request's size is bounded, not its count of
// <coproc> elements.
const maxCoprocKinds = 7

// storedCoprocs is host.coprocs for a request's coprocessors: at most
// maxCoprocKinds of them, names clipped as other host text is, numbers
// finite.
func storedCoprocs(cs []protocol.Coproc) string {
	cs = cs[:min(len(cs), maxCoprocKinds)]
	for i := range cs {
		c := &cs[i]
		c.Type, c.Name = text(c.Type), text(c.Name)
		c.PeakFlops, c.RAM = finite(c.PeakFlops), finite(c.RAM)
		if c.OpenCL != nil {
			o := *c.OpenCL
			o.Name, o.Vendor, o.DeviceVersion, o.DriverVersion = text(o.Name), text(o.Vendor), text(o.DeviceVersion), text(o.DriverVersion)
			o.PeakFlops = finite(o.PeakFlops)
			c.OpenCL = &o
		}
	}
	return protocol.EncodeCoprocs(cs)
}

// clientVersion is the request's client version as BOINC counts it,
// major*10000 + minor*100 + release; 0 if it names none.
func clientVersion(req *protocol.SchedulerRequest) int {
	maj, minor, rel := req.CoreClientMajorVersion, req.CoreClientMinorVersion, req.CoreClientRelease
	if maj <= 0 || maj > 200 || minor < 0 || minor > 99 || rel < 0 || rel > 99 {
		return 0
	}
	return maj*10000 + minor*100 + rel
}

// hostFromRequest copies the request's description of the host into h (its
// host_cpid hashed with email, the owner's address: storedHostCPID). A
// request without host_info keeps what the row has.
func hostFromRequest(h row.Host, req *protocol.SchedulerRequest, ip string, now int64, email string) row.Host {
	h.RPCSeqno = int64(clampInt32(req.RPCSeqno))
	h.RPCTime = now
	h.LastIPAddr = text(ip)
	hi := req.HostInfo
	if hi.PNCPUs > 0 || hi.PFpops > 0 || hi.HostCPID != "" || hi.OSName != "" || hi.MNbytes > 0 {
		h.Timezone = int(clampInt32(int64(hi.Timezone)))
		h.DomainName = text(hi.DomainName)
		h.HostCPID = storedHostCPID(text(hi.HostCPID), email)
		h.PNCPUs = int(max(min(int64(hi.PNCPUs), 1<<16), 0))
		h.PVendor = text(hi.PVendor)
		h.PModel = text(hi.PModel)
		h.PFpops = finite(hi.PFpops)
		h.PIops = finite(hi.PIops)
		h.MNbytes = finite(hi.MNbytes)
		h.MSwap = finite(hi.MSwap)
		h.DTotal = finite(hi.DTotal)
		h.DFree = finite(hi.DFree)
		h.OSName = text(hi.OSName)
		h.OSVersion = text(hi.OSVersion)
		h.PFeatures = features(hi.PFeatures)
	}
	if req.Coprocs != nil {
		h.Coprocs = storedCoprocs(req.Coprocs.Resources())
	}
	if v := clientVersion(req); v > 0 {
		h.ClientVersion = v
	}
	ts := req.TimeStats
	if ts.OnFrac != 0 || ts.ActiveFrac != 0 {
		h.OnFrac = finite(ts.OnFrac)
		h.ActiveFrac = finite(ts.ActiveFrac)
	}
	return h
}
