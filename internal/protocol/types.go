// Package protocol holds the BOINC scheduler RPC and data-server messages as
// Go types, with a lenient parser for what clients send (the real client does
// not XML-escape names and authenticators) and a writer for what the server
// sends. The scheduler and data server use it on one side, the simulated
// client on the other. Element names are BOINC's; see
// ../shared/protocol/PROTOCOL.md.
package protocol

import "encoding/xml"

// SchedulerRequest is a client's <scheduler_request>.
type SchedulerRequest struct {
	XMLName                   xml.Name       `xml:"scheduler_request"`
	Authenticator             string         `xml:"authenticator"`
	HostID                    int64          `xml:"hostid"`
	RPCSeqno                  int64          `xml:"rpc_seqno"`
	CoreClientMajorVersion    int            `xml:"core_client_major_version"`
	CoreClientMinorVersion    int            `xml:"core_client_minor_version"`
	CoreClientRelease         int            `xml:"core_client_release"`
	ResourceShareFraction     float64        `xml:"resource_share_fraction"`
	DurationCorrectionFactor  float64        `xml:"duration_correction_factor"`
	DontSendWork              int            `xml:"dont_send_work"`
	WorkReqSeconds            float64        `xml:"work_req_seconds"`
	CPUReqSecs                float64        `xml:"cpu_req_secs"`
	CPUReqInstances           float64        `xml:"cpu_req_instances"`
	EstimatedDelay            float64        `xml:"estimated_delay"`
	PlatformName              string         `xml:"platform_name"`
	AltPlatforms              []AltPlatform  `xml:"alt_platform"`
	CodeSignKey               string         `xml:"code_sign_key"`
	CrossProjectID            string         `xml:"cross_project_id"`
	HostInfo                  HostInfo       `xml:"host_info"`
	TimeStats                 TimeStats      `xml:"time_stats"`
	Results                   []ReportResult `xml:"result"`
	AppVersions               []ClientAppVer `xml:"app_versions>app_version"`
	OtherResults              []OtherResult  `xml:"other_results>other_result"`
	InProgressResults         []IPResult     `xml:"in_progress_results>ip_result"`
	WorkingGlobalPreferences  RawXML         `xml:"working_global_preferences"`
	GlobalPrefsSourceEmailHsh string         `xml:"global_prefs_source_email_hash"`
}

// RawXML keeps an element's inner XML unparsed.
type RawXML struct {
	Inner string `xml:",innerxml"`
}

// AltPlatform is one <alt_platform>.
type AltPlatform struct {
	Name string `xml:"name"`
}

// HostInfo is the client's <host_info>.
type HostInfo struct {
	Timezone   int     `xml:"timezone"`
	DomainName string  `xml:"domain_name"`
	IPAddr     string  `xml:"ip_addr"`
	HostCPID   string  `xml:"host_cpid"`
	PNCPUs     int     `xml:"p_ncpus"`
	PVendor    string  `xml:"p_vendor"`
	PModel     string  `xml:"p_model"`
	PFeatures  string  `xml:"p_features"`
	PFpops     float64 `xml:"p_fpops"`
	PIops      float64 `xml:"p_iops"`
	PMembw     float64 `xml:"p_membw"`
	MNbytes    float64 `xml:"m_nbytes"`
	MCache     float64 `xml:"m_cache"`
	MSwap      float64 `xml:"m_swap"`
	DTotal     float64 `xml:"d_total"`
	DFree      float64 `xml:"d_free"`
	OSName     string  `xml:"os_name"`
	OSVersion  string  `xml:"os_version"`
}

// TimeStats is the client's <time_stats>.
type TimeStats struct {
	OnFrac        float64 `xml:"on_frac"`
	ConnectedFrac float64 `xml:"connected_frac"`
	ActiveFrac    float64 `xml:"active_frac"`
}

// ReportResult is a completed task in a request's <result>.
type ReportResult struct {
	Name             string           `xml:"name"`
	FinalCPUTime     float64          `xml:"final_cpu_time"`
	FinalElapsedTime float64          `xml:"final_elapsed_time"`
	ExitStatus       int              `xml:"exit_status"`
	State            int              `xml:"state"`
	Platform         string           `xml:"platform"`
	VersionNum       int              `xml:"version_num"`
	PlanClass        string           `xml:"plan_class"`
	AppVersionNum    int              `xml:"app_version_num"`
	StderrOut        string           `xml:"stderr_out"`
	FileInfos        []ReportFileInfo `xml:"file_info"`
}

// ReportFileInfo is an uploaded output file listed in a reported result.
type ReportFileInfo struct {
	Name      string  `xml:"name"`
	Nbytes    float64 `xml:"nbytes"`
	MaxNbytes float64 `xml:"max_nbytes"`
	MD5Cksum  string  `xml:"md5_cksum"`
	UploadURL string  `xml:"upload_url"`
	ErrorMsg  string  `xml:"error_msg"`
}

// ClientAppVer is one app version the client has (<app_versions><app_version>).
type ClientAppVer struct {
	AppName    string  `xml:"app_name"`
	VersionNum int     `xml:"version_num"`
	Platform   string  `xml:"platform"`
	PlanClass  string  `xml:"plan_class"`
	AvgNCPUs   float64 `xml:"avg_ncpus"`
	Flops      float64 `xml:"flops"`
}

// OtherResult is a task the client has in progress (<other_results>).
type OtherResult struct {
	Name       string `xml:"name"`
	AppVersion int    `xml:"app_version"`
	PlanClass  string `xml:"plan_class"`
}

// IPResult is one <in_progress_results><ip_result>.
type IPResult struct {
	Name           string  `xml:"name"`
	ReportDeadline float64 `xml:"report_deadline"`
	TimeRemaining  float64 `xml:"time_remaining"`
	AvgNCPUs       float64 `xml:"avg_ncpus"`
}

// SchedulerReply is the server's <scheduler_reply>.
type SchedulerReply struct {
	XMLName          xml.Name      `xml:"scheduler_reply"`
	SchedulerVersion int           `xml:"scheduler_version,omitempty"`
	MasterURL        string        `xml:"master_url,omitempty"`
	ProjectName      string        `xml:"project_name,omitempty"`
	RequestDelay     float64       `xml:"request_delay,omitempty"`
	NextRPCDelay     float64       `xml:"next_rpc_delay,omitempty"`
	Messages         []Message     `xml:"message"`
	ProjectIsDown    *Empty        `xml:"project_is_down"`
	UserID           int64         `xml:"userid,omitempty"`
	UserName         string        `xml:"user_name,omitempty"`
	UserTotalCredit  float64       `xml:"user_total_credit,omitempty"`
	UserExpavgCredit float64       `xml:"user_expavg_credit,omitempty"`
	UserCreateTime   int64         `xml:"user_create_time,omitempty"`
	CrossProjectID   string        `xml:"cross_project_id,omitempty"`
	HostID           int64         `xml:"hostid,omitempty"`
	HostTotalCredit  float64       `xml:"host_total_credit,omitempty"`
	HostExpavgCredit float64       `xml:"host_expavg_credit,omitempty"`
	HostCreateTime   int64         `xml:"host_create_time,omitempty"`
	CodeSignKey      string        `xml:"code_sign_key,omitempty"`
	Apps             []App         `xml:"app"`
	FileInfos        []FileInfo    `xml:"file_info"`
	AppVersions      []AppVersion  `xml:"app_version"`
	Workunits        []Workunit    `xml:"workunit"`
	Results          []Result      `xml:"result"`
	ResultAcks       []NameElement `xml:"result_ack"`
	ResultAborts     []NameElement `xml:"result_abort"`
	ResultAbortsINS  []NameElement `xml:"result_abort_if_not_started"`
}

// Empty is a flag element written as <x/>.
type Empty struct{}

// Message is a <message priority="...">text</message>.
type Message struct {
	Priority string `xml:"priority,attr"`
	Text     string `xml:",chardata"`
}

// NameElement is an element whose only child is <name>.
type NameElement struct {
	Name string `xml:"name"`
}

// App is a reply's <app>.
type App struct {
	Name             string `xml:"name"`
	UserFriendlyName string `xml:"user_friendly_name,omitempty"`
}

// FileInfo is a reply's <file_info>: an app file, an input or an output.
type FileInfo struct {
	Name          string   `xml:"name"`
	URLs          []string `xml:"url"`
	Executable    *Empty   `xml:"executable"`
	MD5Cksum      string   `xml:"md5_cksum,omitempty"`
	Nbytes        float64  `xml:"nbytes,omitempty"`
	MaxNbytes     float64  `xml:"max_nbytes,omitempty"`
	FileSignature string   `xml:"file_signature,omitempty"`
	XMLSignature  string   `xml:"xml_signature,omitempty"`
}

// FileRef links an app version, workunit or result to a file_info.
type FileRef struct {
	FileName    string `xml:"file_name"`
	OpenName    string `xml:"open_name,omitempty"`
	MainProgram *Empty `xml:"main_program"`
	CopyFile    *Empty `xml:"copy_file"`
	Optional    *Empty `xml:"optional"`
}

// AppVersion is a reply's <app_version>.
type AppVersion struct {
	AppName    string    `xml:"app_name"`
	VersionNum int       `xml:"version_num"`
	Platform   string    `xml:"platform,omitempty"`
	PlanClass  string    `xml:"plan_class,omitempty"`
	AvgNCPUs   float64   `xml:"avg_ncpus,omitempty"`
	Flops      float64   `xml:"flops,omitempty"`
	APIVersion string    `xml:"api_version,omitempty"`
	FileRefs   []FileRef `xml:"file_ref"`
}

// Workunit is a reply's <workunit>.
type Workunit struct {
	Name           string    `xml:"name"`
	AppName        string    `xml:"app_name"`
	VersionNum     int       `xml:"version_num,omitempty"`
	CommandLine    string    `xml:"command_line,omitempty"`
	RscFpopsEst    float64   `xml:"rsc_fpops_est,omitempty"`
	RscFpopsBound  float64   `xml:"rsc_fpops_bound,omitempty"`
	RscMemoryBound float64   `xml:"rsc_memory_bound,omitempty"`
	RscDiskBound   float64   `xml:"rsc_disk_bound,omitempty"`
	FileRefs       []FileRef `xml:"file_ref"`
}

// Result is a reply's <result>: a task sent to the client.
type Result struct {
	Name              string    `xml:"name"`
	WUName            string    `xml:"wu_name"`
	Platform          string    `xml:"platform,omitempty"`
	VersionNum        int       `xml:"version_num,omitempty"`
	PlanClass         string    `xml:"plan_class,omitempty"`
	ReportDeadline    float64   `xml:"report_deadline"`
	FileRefs          []FileRef `xml:"file_ref"`
	ReportImmediately *Empty    `xml:"report_immediately"`
}
