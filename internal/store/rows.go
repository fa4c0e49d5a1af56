package store

import (
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
}

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
}
