// Package row holds the domain rows: platforms, apps, app versions, users,
// hosts, jobs (workunit), instances (result), batches and known answers, in
// BOINC's columns. The store reads and writes them, the rules decide on
// them, and the public plug-in API is built from them; none of them knows
// SQL, so no rule needs to import the store for its types.
package row

import (
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// Platform is a row of platform: an OS/CPU combination such as
// x86_64-pc-linux-gnu.
type Platform struct {
	ID               int64  `db:"id"`
	CreateTime       int64  `db:"create_time"`
	Name             string `db:"name"`
	UserFriendlyName string `db:"user_friendly_name"`
	Deprecated       bool   `db:"deprecated"`
}

// App is a row of app: one science application.
type App struct {
	ID                    int64   `db:"id"`
	CreateTime            int64   `db:"create_time"`
	Name                  string  `db:"name"`
	UserFriendlyName      string  `db:"user_friendly_name"`
	MinVersion            int     `db:"min_version"`
	Deprecated            bool    `db:"deprecated"`
	HomogeneousRedundancy int     `db:"homogeneous_redundancy"`
	Weight                float64 `db:"weight"`
	// AdaptiveReplication sends a job to a single trusted host when it can
	// (see workunit.replication_quorum).
	AdaptiveReplication bool `db:"adaptive_replication"`
	// CreditPolicy is one of CreditFpops, CreditFixed, CreditMedian.
	CreditPolicy string `db:"credit_policy"`
	// HoldFailedJobs puts a job that exhausts its limits on hold instead of
	// failing it.
	HoldFailedJobs bool `db:"hold_failed_jobs"`
	// KnownAnswerFraction is the share of the app's new jobs that are
	// copies of known-answer jobs.
	KnownAnswerFraction float64 `db:"known_answer_fraction"`
	// InputTemplateID and OutputTemplateID are the app's default
	// templates (job_template rows); 0 is the built-in template: one input
	// opened as "in", one output opened as "out".
	InputTemplateID  int64 `db:"input_template_id"`
	OutputTemplateID int64 `db:"output_template_id"`
	// Beta marks an app under test: its jobs go only to volunteers whose
	// project preferences allow beta work.
	Beta bool `db:"beta"`
}

// Credit policies (app.credit_policy).
const (
	// CreditFpops grants credit from the job's FLOP estimate.
	CreditFpops = "fpops"
	// CreditFixed grants the job's fixed_credit.
	CreditFixed = "fixed"
	// CreditMedian grants the median of the claimed credit of the valid
	// results of the quorum.
	CreditMedian = "median"
)

// AppVersion is a row of app_version: one build of an app for one platform.
// XMLDoc holds the <file_info> elements and the <app_version> element sent to
// clients.
type AppVersion struct {
	ID         int64  `db:"id"`
	CreateTime int64  `db:"create_time"`
	AppID      int64  `db:"appid"`
	VersionNum int    `db:"version_num"`
	PlatformID int64  `db:"platformid"`
	PlanClass  string `db:"plan_class"`
	XMLDoc     string `db:"xml_doc"`
	Deprecated bool   `db:"deprecated"`
	// Beta marks a version under test: it is sent only to volunteers whose
	// project preferences allow beta work.
	Beta bool `db:"beta"`
}

// User is a row of user: a volunteer account.
type User struct {
	ID             int64   `db:"id"`
	CreateTime     int64   `db:"create_time"`
	EmailAddr      string  `db:"email_addr"`
	Name           string  `db:"name"`
	Authenticator  string  `db:"authenticator"`
	PasswdHash     string  `db:"passwd_hash"`
	TotalCredit    float64 `db:"total_credit"`
	ExpavgCredit   float64 `db:"expavg_credit"`
	ExpavgTime     float64 `db:"expavg_time"`
	TeamID         int64   `db:"teamid"`
	CrossProjectID string  `db:"cross_project_id"`
	// SubmitAllowed lets the user submit batches through the submission API.
	SubmitAllowed bool `db:"submit_allowed"`
	// ProjectPrefs is the volunteer's <project_preferences> document, as
	// BOINC stores it (package projectprefs reads it); empty for none.
	ProjectPrefs Text `db:"project_prefs"`
}

// Team is a team row: BOINC's team, with the columns the task server, its
// replies and the statistics export use.
type Team struct {
	ID         int64 `db:"id"`
	CreateTime int64 `db:"create_time"`
	// UserID is the founder.
	UserID      int64  `db:"userid"`
	Name        string `db:"name"`
	NameLC      string `db:"name_lc"`
	URL         string `db:"url"`
	Type        int    `db:"type"`
	NameHTML    string `db:"name_html"`
	Description Text   `db:"description"`
	// NUsers, TotalCredit and ExpavgCredit are kept up to date as members
	// join, leave and are granted credit.
	NUsers       int     `db:"nusers"`
	Country      string  `db:"country"`
	TotalCredit  float64 `db:"total_credit"`
	ExpavgCredit float64 `db:"expavg_credit"`
	ExpavgTime   float64 `db:"expavg_time"`
	Joinable     bool    `db:"joinable"`
}

// Text is a TEXT column that may be NULL (BOINC's schema leaves its
// documents nullable): NULL reads as "", and "" is written as "".
type Text string

// Scan reads a column value into t.
func (t *Text) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*t = ""
	case string:
		*t = Text(x)
	case []byte:
		*t = Text(x)
	default:
		return fmt.Errorf("read text column: unexpected %T", v)
	}
	return nil
}

// Host is a row of host: one volunteer computer.
type Host struct {
	ID            int64   `db:"id"`
	CreateTime    int64   `db:"create_time"`
	UserID        int64   `db:"userid"`
	RPCSeqno      int64   `db:"rpc_seqno"`
	RPCTime       int64   `db:"rpc_time"`
	TotalCredit   float64 `db:"total_credit"`
	ExpavgCredit  float64 `db:"expavg_credit"`
	ExpavgTime    float64 `db:"expavg_time"`
	Timezone      int     `db:"timezone"`
	DomainName    string  `db:"domain_name"`
	LastIPAddr    string  `db:"last_ip_addr"`
	HostCPID      string  `db:"host_cpid"`
	PNCPUs        int     `db:"p_ncpus"`
	PVendor       string  `db:"p_vendor"`
	PModel        string  `db:"p_model"`
	PFpops        float64 `db:"p_fpops"`
	PIops         float64 `db:"p_iops"`
	MNbytes       float64 `db:"m_nbytes"`
	MSwap         float64 `db:"m_swap"`
	DTotal        float64 `db:"d_total"`
	DFree         float64 `db:"d_free"`
	OSName        string  `db:"os_name"`
	OSVersion     string  `db:"os_version"`
	OnFrac        float64 `db:"on_frac"`
	ActiveFrac    float64 `db:"active_frac"`
	NResultsToday int     `db:"nresults_today"`
	AvgTurnaround float64 `db:"avg_turnaround"`
	// ConsecutiveValid counts valid results since the host's last invalid
	// or error result.
	ConsecutiveValid int `db:"consecutive_valid"`
	// ErrorStreak counts error or invalid results since the host's last
	// valid one.
	ErrorStreak int `db:"error_streak"`
	// PFeatures are the CPU features the client reports, space-separated
	// (/proc/cpuinfo flags), which plan classes test.
	PFeatures string `db:"p_features"`
	// Coprocs is the host's coprocessors as last reported, in
	// protocol.EncodeCoprocs's canonical text ("" none).
	Coprocs string `db:"coprocs"`
	// ClientVersion is the client's major*10000 + minor*100 + release
	// (0 unknown).
	ClientVersion int `db:"client_version"`
}

// Workunit is a row of workunit: a job.
type Workunit struct {
	ID                int64                 `db:"id"`
	CreateTime        int64                 `db:"create_time"`
	AppID             int64                 `db:"appid"`
	Name              string                `db:"name"`
	XMLDoc            string                `db:"xml_doc"`
	Batch             int64                 `db:"batch"`
	RscFpopsEst       float64               `db:"rsc_fpops_est"`
	RscFpopsBound     float64               `db:"rsc_fpops_bound"`
	RscMemoryBound    float64               `db:"rsc_memory_bound"`
	RscDiskBound      float64               `db:"rsc_disk_bound"`
	NeedValidate      bool                  `db:"need_validate"`
	CanonicalResultID int64                 `db:"canonical_resultid"`
	CanonicalCredit   float64               `db:"canonical_credit"`
	TransitionTime    int64                 `db:"transition_time"`
	DelayBound        int64                 `db:"delay_bound"`
	ErrorMask         state.ErrorMask       `db:"error_mask"`
	FileDeleteState   state.FileDeleteState `db:"file_delete_state"`
	AssimilateState   state.AssimilateState `db:"assimilate_state"`
	HRClass           int                   `db:"hr_class"`
	Opaque            float64               `db:"opaque"`
	MinQuorum         int                   `db:"min_quorum"`
	TargetNResults    int                   `db:"target_nresults"`
	MaxErrorResults   int                   `db:"max_error_results"`
	MaxTotalResults   int                   `db:"max_total_results"`
	MaxSuccessResults int                   `db:"max_success_results"`
	Priority          int                   `db:"priority"`
	ModTime           int64                 `db:"mod_time"`
	// HoldReason is the error bit the job would have failed with, when its
	// app holds failed jobs; 0 when not held.
	HoldReason state.ErrorMask `db:"hold_reason"`
	HoldTime   int64           `db:"hold_time"`
	// FixedCredit is the credit of a valid result under CreditFixed.
	FixedCredit float64 `db:"fixed_credit"`
	// ReplicationQuorum is, under adaptive replication, the quorum the job
	// needs once it is replicated; 0 when not adaptive.
	ReplicationQuorum int `db:"replication_quorum"`
	// KnownAnswerID is the known_answer row this job is a copy of; 0 for
	// a science job.
	KnownAnswerID int64 `db:"known_answer_id"`
	// TailCopies counts the instances tail acceleration added.
	TailCopies int `db:"tail_copies"`
	// OutputTemplateID is the job_template row from which each new
	// instance's output files are made; 0 is the built-in template.
	OutputTemplateID int64 `db:"output_template_id"`
}

// Result is a row of result: one instance of a job.
type Result struct {
	ID              int64                 `db:"id"`
	CreateTime      int64                 `db:"create_time"`
	WorkunitID      int64                 `db:"workunitid"`
	ServerState     state.ServerState     `db:"server_state"`
	Outcome         state.Outcome         `db:"outcome"`
	ClientState     state.ClientState     `db:"client_state"`
	HostID          int64                 `db:"hostid"`
	UserID          int64                 `db:"userid"`
	ReportDeadline  int64                 `db:"report_deadline"`
	SentTime        int64                 `db:"sent_time"`
	ReceivedTime    int64                 `db:"received_time"`
	Name            string                `db:"name"`
	CPUTime         float64               `db:"cpu_time"`
	XMLDocIn        string                `db:"xml_doc_in"`
	XMLDocOut       string                `db:"xml_doc_out"`
	StderrOut       string                `db:"stderr_out"`
	Batch           int64                 `db:"batch"`
	FileDeleteState state.FileDeleteState `db:"file_delete_state"`
	ValidateState   state.ValidateState   `db:"validate_state"`
	ClaimedCredit   float64               `db:"claimed_credit"`
	GrantedCredit   float64               `db:"granted_credit"`
	Opaque          float64               `db:"opaque"`
	Random          int64                 `db:"random"`
	AppVersionNum   int                   `db:"app_version_num"`
	AppID           int64                 `db:"appid"`
	ExitStatus      int                   `db:"exit_status"`
	TeamID          int64                 `db:"teamid"`
	Priority        int                   `db:"priority"`
	ModTime         int64                 `db:"mod_time"`
	ElapsedTime     float64               `db:"elapsed_time"`
	AppVersionID    int64                 `db:"app_version_id"`
	// FlopsEstimate is the speed the scheduler told the client to assume
	// for the instance's version when it sent it: the client's runtime
	// estimate is the job's rsc_fpops_est / FlopsEstimate.
	FlopsEstimate float64 `db:"flops_estimate"`
	// SendFlags restricts which hosts may get the instance (SendReliableOnly).
	SendFlags int `db:"send_flags"`
}

// SendReliableOnly is the result.send_flags bit of an instance that only a
// fast, reliable host may get (tail acceleration).
const SendReliableOnly = 1

// Batch is a row of batch: jobs submitted together.
type Batch struct {
	ID          int64  `db:"id"`
	CreateTime  int64  `db:"create_time"`
	AppID       int64  `db:"appid"`
	UserID      int64  `db:"userid"`
	Name        string `db:"name"`
	Description string `db:"description"`
	// IdempotencyKey is empty when the submitter gave none (stored NULL).
	IdempotencyKey string     `db:"idempotency_key"`
	State          BatchState `db:"state"`
	NJobs          int        `db:"njobs"`
	CompletionTime int64      `db:"completion_time"`
	CancelTime     int64      `db:"cancel_time"`
}

// BatchState is batch.state.
type BatchState int

// Batch states.
const (
	BatchInProgress BatchState = 1
	BatchDone       BatchState = 2
	BatchCancelled  BatchState = 3
)

func (b BatchState) String() string {
	switch b {
	case BatchInProgress:
		return "in_progress"
	case BatchDone:
		return "done"
	case BatchCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("batch_state(%d)", int(b))
}

// KnownAnswer is a row of known_answer: an input whose correct output the
// project knows.
type KnownAnswer struct {
	ID         int64  `db:"id"`
	CreateTime int64  `db:"create_time"`
	AppID      int64  `db:"appid"`
	Name       string `db:"name"`
	Input      []byte `db:"input"`
	Output     []byte `db:"output"`
}

// HostGrant is the credit one valid instance of a host was granted, with
// its job's FLOP estimate: the host's record that bounds its next claims.
type HostGrant struct {
	HostID        int64   `db:"hostid"`
	GrantedCredit float64 `db:"granted_credit"`
	RscFpopsEst   float64 `db:"rsc_fpops_est"`
}

// JobTemplate is a stored input or output template (BOINC's format),
// kept once by its content.
type JobTemplate struct {
	ID         int64  `db:"id"`
	CreateTime int64  `db:"create_time"`
	Kind       string `db:"kind"`
	MD5        string `db:"md5"`
	Body       string `db:"body"`
}

// SharedFile is an input file staged once and used by many jobs.
type SharedFile struct {
	ID            int64   `db:"id"`
	CreateTime    int64   `db:"create_time"`
	Name          string  `db:"name"`
	MD5           string  `db:"md5"`
	Nbytes        float64 `db:"nbytes"`
	GzippedNbytes float64 `db:"gzipped_nbytes"`
	State         int     `db:"state"`
	LastRefTime   int64   `db:"last_ref_time"`
	NJobs         int64   `db:"njobs"`
}

// Shared file states (shared_file.state).
const (
	SharedFileLive     = 0
	SharedFileDeleting = 1
	SharedFileDeleted  = 2
)

// MsgFromHost is a trickle-up message: sent by a running application
// through the client, stored by the scheduler, handled once by a trickle
// handler.
type MsgFromHost struct {
	ID         int64  `db:"id"`
	CreateTime int64  `db:"create_time"`
	HostID     int64  `db:"hostid"`
	Variety    string `db:"variety"`
	Handled    bool   `db:"handled"`
	ResultName string `db:"result_name"`
	// MD5 is of the message as received (XML): a message the client sends
	// again is stored once.
	MD5 string `db:"msg_md5"`
	// XML is the message as received: the task's name and time, then the
	// application's text (its <variety> and body).
	XML string `db:"xml"`
}

// MsgToHost is a trickle-down message queued for a host: XML is the whole
// <trickle_down> element the scheduler puts in its reply, once.
type MsgToHost struct {
	ID         int64  `db:"id"`
	CreateTime int64  `db:"create_time"`
	HostID     int64  `db:"hostid"`
	Variety    string `db:"variety"`
	Handled    bool   `db:"handled"`
	XML        string `db:"xml"`
}

// HostAppVersion is a row of host_app_version: what one host has shown of
// one app version (BOINC's host_app_version). The scheduler picks versions,
// estimates runtimes and applies the daily quota from it; the validator
// adds valid results to it.
type HostAppVersion struct {
	HostID int64 `db:"host_id"`
	// AppVersionID is the version's id, or for an anonymous-platform
	// client's own build -(appid*1000000 + resource number).
	AppVersionID int64 `db:"app_version_id"`
	// EtN, EtAvg, EtVar and EtMedian are the count, mean, variance and a
	// running median estimate of elapsed_time / rsc_fpops_est over valid
	// results: seconds per estimated FLOP, the inverse of the host's rate.
	EtN      int     `db:"et_n"`
	EtAvg    float64 `db:"et_avg"`
	EtVar    float64 `db:"et_var"`
	EtMedian float64 `db:"et_median"`
	// TurnaroundN and TurnaroundAvg are of the send-to-report seconds of
	// valid results.
	TurnaroundN      int     `db:"turnaround_n"`
	TurnaroundAvg    float64 `db:"turnaround_avg"`
	ConsecutiveValid int     `db:"consecutive_valid"`
	// MaxJobsPerDay is the daily quota per CPU (per GPU for a GPU
	// version); 0 means not set yet (the project's full quota).
	MaxJobsPerDay int `db:"max_jobs_per_day"`
	// NJobsToday counts jobs sent on Day (days since 1970-01-01 UTC).
	NJobsToday int   `db:"n_jobs_today"`
	Day        int64 `db:"day"`
	NErrors    int   `db:"n_errors"`
	NValid     int   `db:"n_valid"`
}
