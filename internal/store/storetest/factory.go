package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// The row factories below insert one row each and return it with its id.
// A zero option is written as zero, so a test states every number it
// relies on; only what makes a row exist is filled in: a missing name gets
// a unique one, a missing parent row (the app of a job, the job of an
// instance) is made.

// seq numbers the names the factories make up, unique across the tests of
// a process so parallel tests on one database never collide.
var seq atomic.Int64

// uniqueName returns prefix followed by a number no other call returned.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, seq.Add(1))
}

// PlatformOptions describes the platform Platform makes.
type PlatformOptions struct {
	CreateTime int64
	// Name is unique when empty.
	Name             string
	UserFriendlyName string
	Deprecated       bool
}

// Platform inserts a platform.
func Platform(t testing.TB, st *store.Store, o PlatformOptions) row.Platform {
	t.Helper()
	p := row.Platform{CreateTime: o.CreateTime, Name: o.Name, UserFriendlyName: o.UserFriendlyName, Deprecated: o.Deprecated}
	if p.Name == "" {
		p.Name = uniqueName("platform")
	}
	id, err := st.PlatformInsert(context.Background(), p)
	if err != nil {
		t.Fatalf("PlatformInsert(%s): %v", p.Name, err)
	}
	p.ID = id
	return p
}

// AppOptions describes the app App makes.
type AppOptions struct {
	CreateTime int64
	// Name is unique when empty.
	Name string
	// UserFriendlyName is Name when empty.
	UserFriendlyName      string
	MinVersion            int
	Deprecated            bool
	HomogeneousRedundancy int
	Weight                float64
	AdaptiveReplication   bool
	CreditPolicy          string
	HoldFailedJobs        bool
	KnownAnswerFraction   float64
	Beta                  bool
}

// App inserts an app.
func App(t testing.TB, st *store.Store, o AppOptions) row.App {
	t.Helper()
	a := row.App{CreateTime: o.CreateTime, Name: o.Name, UserFriendlyName: o.UserFriendlyName, MinVersion: o.MinVersion,
		Deprecated: o.Deprecated, HomogeneousRedundancy: o.HomogeneousRedundancy, Weight: o.Weight,
		AdaptiveReplication: o.AdaptiveReplication, CreditPolicy: o.CreditPolicy, HoldFailedJobs: o.HoldFailedJobs,
		KnownAnswerFraction: o.KnownAnswerFraction, Beta: o.Beta}
	if a.Name == "" {
		a.Name = uniqueName("app")
	}
	if a.UserFriendlyName == "" {
		a.UserFriendlyName = a.Name
	}
	id, err := st.AppInsert(context.Background(), a)
	if err != nil {
		t.Fatalf("AppInsert(%s): %v", a.Name, err)
	}
	a.ID = id
	return a
}

// AppVersionOptions describes the app version AppVersion makes.
type AppVersionOptions struct {
	CreateTime int64
	// App is the app's id; 0 makes a new app.
	App        int64
	VersionNum int
	// Platform is the platform's id; 0 makes a new platform.
	Platform   int64
	PlanClass  string
	XMLDoc     string
	Deprecated bool
	Beta       bool
}

// AppVersion inserts an app version.
func AppVersion(t testing.TB, st *store.Store, o AppVersionOptions) row.AppVersion {
	t.Helper()
	if o.App == 0 {
		o.App = App(t, st, AppOptions{CreateTime: o.CreateTime}).ID
	}
	if o.Platform == 0 {
		o.Platform = Platform(t, st, PlatformOptions{CreateTime: o.CreateTime}).ID
	}
	v := row.AppVersion{CreateTime: o.CreateTime, AppID: o.App, VersionNum: o.VersionNum, PlatformID: o.Platform,
		PlanClass: o.PlanClass, XMLDoc: o.XMLDoc, Deprecated: o.Deprecated, Beta: o.Beta}
	id, err := st.AppVersionInsert(context.Background(), v)
	if err != nil {
		t.Fatalf("AppVersionInsert(app %d, version %d): %v", v.AppID, v.VersionNum, err)
	}
	v.ID = id
	return v
}

// UserOptions describes the user User makes.
type UserOptions struct {
	CreateTime int64
	// EmailAddr is <Name>@example.org when empty.
	EmailAddr string
	// Name is unique when empty.
	Name string
	// Authenticator is unique when empty.
	Authenticator  string
	PasswdHash     string
	TotalCredit    float64
	ExpavgCredit   float64
	ExpavgTime     float64
	TeamID         int64
	CrossProjectID string
	SubmitAllowed  bool
	// ProjectPrefs is the <project_preferences> document; empty stores none.
	ProjectPrefs string
}

// User inserts a user.
func User(t testing.TB, st *store.Store, o UserOptions) row.User {
	t.Helper()
	u := row.User{CreateTime: o.CreateTime, EmailAddr: o.EmailAddr, Name: o.Name, Authenticator: o.Authenticator,
		PasswdHash: o.PasswdHash, TotalCredit: o.TotalCredit, ExpavgCredit: o.ExpavgCredit, ExpavgTime: o.ExpavgTime,
		TeamID: o.TeamID, CrossProjectID: o.CrossProjectID, SubmitAllowed: o.SubmitAllowed,
		ProjectPrefs: row.Text(o.ProjectPrefs)}
	if u.Name == "" {
		u.Name = uniqueName("user")
	}
	if u.EmailAddr == "" {
		u.EmailAddr = u.Name + "@example.org"
	}
	if u.Authenticator == "" {
		u.Authenticator = uniqueName("auth")
	}
	id, err := st.UserInsert(context.Background(), u)
	if err != nil {
		t.Fatalf("UserInsert(%s): %v", u.Name, err)
	}
	u.ID = id
	return u
}

// TeamOptions describes the team Team makes.
type TeamOptions struct {
	CreateTime int64
	// Name is unique when empty.
	Name string
	// Founder, if not 0, is a user who joins the team as it is made.
	Founder int64
	// Closed makes a team that takes no members (joinable = 0).
	Closed bool
}

// Team creates a team through the store, as taskctl team create does.
func Team(t testing.TB, st *store.Store, o TeamOptions) row.Team {
	t.Helper()
	tm := row.Team{CreateTime: o.CreateTime, Name: o.Name, UserID: o.Founder, Joinable: !o.Closed}
	if tm.Name == "" {
		tm.Name = uniqueName("team")
	}
	id, err := st.TeamCreate(context.Background(), tm)
	if err != nil {
		t.Fatalf("TeamCreate(%s): %v", tm.Name, err)
	}
	got, err := st.TeamGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// HostOptions describes the host Host makes: every column the scheduler
// writes when a host first contacts it.
type HostOptions struct {
	CreateTime int64
	// User is the owner's id; 0 is a host of no user.
	User          int64
	RPCSeqno      int64
	RPCTime       int64
	TotalCredit   float64
	ExpavgCredit  float64
	ExpavgTime    float64
	Timezone      int
	DomainName    string
	LastIPAddr    string
	HostCPID      string
	PNCPUs        int
	PVendor       string
	PModel        string
	PFpops        float64
	PIops         float64
	MNbytes       float64
	MSwap         float64
	DTotal        float64
	DFree         float64
	OSName        string
	OSVersion     string
	OnFrac        float64
	ActiveFrac    float64
	NResultsToday int
	AvgTurnaround float64
	PFeatures     string
	Coprocs       string
	ClientVersion int
}

// Host inserts a host.
func Host(t testing.TB, st *store.Store, o HostOptions) row.Host {
	t.Helper()
	h := row.Host{CreateTime: o.CreateTime, UserID: o.User, RPCSeqno: o.RPCSeqno, RPCTime: o.RPCTime,
		TotalCredit: o.TotalCredit, ExpavgCredit: o.ExpavgCredit, ExpavgTime: o.ExpavgTime, Timezone: o.Timezone,
		DomainName: o.DomainName, LastIPAddr: o.LastIPAddr, HostCPID: o.HostCPID, PNCPUs: o.PNCPUs, PVendor: o.PVendor,
		PModel: o.PModel, PFpops: o.PFpops, PIops: o.PIops, MNbytes: o.MNbytes, MSwap: o.MSwap, DTotal: o.DTotal,
		DFree: o.DFree, OSName: o.OSName, OSVersion: o.OSVersion, OnFrac: o.OnFrac, ActiveFrac: o.ActiveFrac,
		NResultsToday: o.NResultsToday, AvgTurnaround: o.AvgTurnaround, PFeatures: o.PFeatures, Coprocs: o.Coprocs,
		ClientVersion: o.ClientVersion}
	id, err := st.HostInsert(context.Background(), h)
	if err != nil {
		t.Fatalf("HostInsert(user %d): %v", h.UserID, err)
	}
	h.ID = id
	return h
}

// JobOptions describes the job Job makes: every column of a workunit.
type JobOptions struct {
	CreateTime int64
	// App is the app's id; 0 makes a new app.
	App int64
	// Name is unique when empty.
	Name              string
	XMLDoc            string
	Batch             int64
	RscFpopsEst       float64
	RscFpopsBound     float64
	RscMemoryBound    float64
	RscDiskBound      float64
	NeedValidate      bool
	CanonicalResultID int64
	CanonicalCredit   float64
	TransitionTime    int64
	DelayBound        int64
	ErrorMask         state.ErrorMask
	FileDeleteState   state.FileDeleteState
	AssimilateState   state.AssimilateState
	HRClass           int
	Opaque            float64
	MinQuorum         int
	TargetNResults    int
	MaxErrorResults   int
	MaxTotalResults   int
	MaxSuccessResults int
	Priority          int
	ModTime           int64
	HoldReason        state.ErrorMask
	HoldTime          int64
	FixedCredit       float64
	ReplicationQuorum int
	KnownAnswerID     int64
	TailCopies        int
}

// Job inserts a job through the work generator's writer (the store has no
// single-job insert: jobs arrive in batches) and returns it as stored.
func Job(t testing.TB, st *store.Store, o JobOptions) row.Workunit {
	t.Helper()
	if o.App == 0 {
		o.App = App(t, st, AppOptions{CreateTime: o.CreateTime}).ID
	}
	if o.Name == "" {
		o.Name = uniqueName("job")
	}
	wu := row.Workunit{CreateTime: o.CreateTime, AppID: o.App, Name: o.Name, XMLDoc: o.XMLDoc, Batch: o.Batch,
		RscFpopsEst: o.RscFpopsEst, RscFpopsBound: o.RscFpopsBound, RscMemoryBound: o.RscMemoryBound,
		RscDiskBound: o.RscDiskBound, NeedValidate: o.NeedValidate, CanonicalResultID: o.CanonicalResultID,
		CanonicalCredit: o.CanonicalCredit, TransitionTime: o.TransitionTime, DelayBound: o.DelayBound,
		ErrorMask: o.ErrorMask, FileDeleteState: o.FileDeleteState, AssimilateState: o.AssimilateState,
		HRClass: o.HRClass, Opaque: o.Opaque, MinQuorum: o.MinQuorum, TargetNResults: o.TargetNResults,
		MaxErrorResults: o.MaxErrorResults, MaxTotalResults: o.MaxTotalResults, MaxSuccessResults: o.MaxSuccessResults,
		Priority: o.Priority, ModTime: o.ModTime, HoldReason: o.HoldReason, HoldTime: o.HoldTime,
		FixedCredit: o.FixedCredit, ReplicationQuorum: o.ReplicationQuorum, KnownAnswerID: o.KnownAnswerID,
		TailCopies: o.TailCopies}
	ctx := context.Background()
	if err := st.WorkunitInsertBatch(ctx, []row.Workunit{wu}, nil); err != nil {
		t.Fatalf("insert job %s: %v", wu.Name, err)
	}
	stored, err := st.WorkunitGetByName(ctx, wu.Name)
	if err != nil {
		t.Fatalf("read back job %s: %v", wu.Name, err)
	}
	return stored
}

// InstanceOptions describes the instance Instance makes: every column of a
// result.
type InstanceOptions struct {
	CreateTime int64
	// Job is the job's id; 0 makes a new job (of App, when set).
	Job         int64
	ServerState state.ServerState
	Outcome     state.Outcome
	ClientState state.ClientState
	// Host is the host's id; 0 is an instance no host holds.
	Host int64
	// User is the user's id; 0 is an instance of no user.
	User           int64
	ReportDeadline int64
	SentTime       int64
	ReceivedTime   int64
	// Name is unique when empty.
	Name            string
	CPUTime         float64
	XMLDocIn        string
	XMLDocOut       string
	StderrOut       string
	Batch           int64
	FileDeleteState state.FileDeleteState
	ValidateState   state.ValidateState
	ClaimedCredit   float64
	GrantedCredit   float64
	Opaque          float64
	Random          int64
	AppVersionNum   int
	// App is the app's id; 0 is the job's app (0 if there is no such job).
	App          int64
	ExitStatus   int
	TeamID       int64
	Priority     int
	ModTime      int64
	ElapsedTime  float64
	AppVersionID int64
	SendFlags    int
}

// instanceInsert is here, not in the store: programs make instances only
// in the transitioner's writes, which take a job's whole transition; a test
// puts one instance in the state it needs.
const instanceInsert = `INSERT INTO result (create_time, workunitid, server_state, outcome, client_state, hostid,
userid, report_deadline, sent_time, received_time, name, cpu_time, xml_doc_in, xml_doc_out, stderr_out, batch,
file_delete_state, validate_state, claimed_credit, granted_credit, opaque, random, app_version_num, appid,
exit_status, teamid, priority, mod_time, elapsed_time, app_version_id, send_flags)
VALUES (:create_time, :workunitid, :server_state, :outcome, :client_state, :hostid,
:userid, :report_deadline, :sent_time, :received_time, :name, :cpu_time, :xml_doc_in, :xml_doc_out, :stderr_out, :batch,
:file_delete_state, :validate_state, :claimed_credit, :granted_credit, :opaque, :random, :app_version_num, :appid,
:exit_status, :teamid, :priority, :mod_time, :elapsed_time, :app_version_id, :send_flags)`

// Instance inserts an instance.
func Instance(t testing.TB, st *store.Store, o InstanceOptions) row.Result {
	t.Helper()
	if o.Job == 0 {
		wu := Job(t, st, JobOptions{CreateTime: o.CreateTime, App: o.App})
		o.Job, o.App = wu.ID, wu.AppID
	}
	if o.App == 0 {
		// An instance of a job that does not exist (an orphan a test
		// builds) keeps app 0.
		err := st.DB().QueryRowContext(context.Background(), `SELECT appid FROM workunit WHERE id = ?`, o.Job).Scan(&o.App)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("app of job %d: %v", o.Job, err)
		}
	}
	if o.Name == "" {
		o.Name = uniqueName("instance")
	}
	r := row.Result{CreateTime: o.CreateTime, WorkunitID: o.Job, ServerState: o.ServerState, Outcome: o.Outcome,
		ClientState: o.ClientState, HostID: o.Host, UserID: o.User, ReportDeadline: o.ReportDeadline,
		SentTime: o.SentTime, ReceivedTime: o.ReceivedTime, Name: o.Name, CPUTime: o.CPUTime, XMLDocIn: o.XMLDocIn,
		XMLDocOut: o.XMLDocOut, StderrOut: o.StderrOut, Batch: o.Batch, FileDeleteState: o.FileDeleteState,
		ValidateState: o.ValidateState, ClaimedCredit: o.ClaimedCredit, GrantedCredit: o.GrantedCredit,
		Opaque: o.Opaque, Random: o.Random, AppVersionNum: o.AppVersionNum, AppID: o.App, ExitStatus: o.ExitStatus,
		TeamID: o.TeamID, Priority: o.Priority, ModTime: o.ModTime, ElapsedTime: o.ElapsedTime,
		AppVersionID: o.AppVersionID, SendFlags: o.SendFlags}
	res, err := st.DB().NamedExecContext(context.Background(), instanceInsert, r)
	if err == nil {
		r.ID, err = res.LastInsertId()
	}
	if err != nil {
		t.Fatalf("insert instance %s: %v", r.Name, err)
	}
	return r
}

// Outputs are the output files of the instance called result, one per
// open name, each at most maxNbytes, copied out of the slot: the shape the
// built-in output template gives, with as many files as asked.
func Outputs(result string, openNames []string, maxNbytes float64) []jobxml.OutputFile {
	out := make([]jobxml.OutputFile, len(openNames))
	for i, open := range openNames {
		out[i] = jobxml.OutputFile{Name: jobxml.OutputName(result, i), OpenName: open, MaxNbytes: maxNbytes, CopyFile: true}
	}
	return out
}
