// Package protocol holds the BOINC scheduler RPC and data-server messages as
// Go types, with a lenient parser for what clients send (the real client does
// not XML-escape names and authenticators) and a writer for what the server
// sends. The scheduler and data server use it on one side, the simulated
// client on the other. Element names are BOINC's; see
// ../shared/protocol/PROTOCOL.md.
//
// The struct tags are encoding/xml tags, but the package's own readers and
// writers (ParseSchedulerRequest, WriteSchedulerReply, ...) should be used:
// they accept what the real client sends and write what it reads.
package protocol

import "encoding/xml"

// SchedulerRequest is a client's <scheduler_request> (PROTOCOL.md §3). Fields
// are in the order the client writes them.
type SchedulerRequest struct {
	XMLName                  xml.Name      `xml:"scheduler_request"`
	Authenticator            string        `xml:"authenticator"`
	HostID                   int64         `xml:"hostid"`
	RPCSeqno                 int64         `xml:"rpc_seqno"`
	CoreClientMajorVersion   int           `xml:"core_client_major_version"`
	CoreClientMinorVersion   int           `xml:"core_client_minor_version"`
	CoreClientRelease        int           `xml:"core_client_release"`
	ResourceShareFraction    float64       `xml:"resource_share_fraction"`
	RRSFraction              float64       `xml:"rrs_fraction,omitempty"`
	PRRSFraction             float64       `xml:"prrs_fraction,omitempty"`
	DurationCorrectionFactor float64       `xml:"duration_correction_factor"`
	AllowMultipleClients     int           `xml:"allow_multiple_clients"`
	Sandbox                  int           `xml:"sandbox"`
	DontSendWork             int           `xml:"dont_send_work"`
	WorkReqSeconds           float64       `xml:"work_req_seconds"`
	CPUReqSecs               float64       `xml:"cpu_req_secs"`
	CPUReqInstances          float64       `xml:"cpu_req_instances"`
	EstimatedDelay           float64       `xml:"estimated_delay"`
	PlatformName             string        `xml:"platform_name"`
	AltPlatforms             []AltPlatform `xml:"alt_platform"`
	// CodeSignKey is the project key the client holds; empty until a reply
	// gave it one, which is when the server sends <code_sign_key>.
	CodeSignKey               string    `xml:"code_sign_key,omitempty"`
	WorkingGlobalPreferences  RawXML    `xml:"working_global_preferences,omitempty"`
	GlobalPreferences         RawXML    `xml:"global_preferences,omitempty"`
	GlobalPrefsSourceEmailHsh string    `xml:"global_prefs_source_email_hash,omitempty"`
	CrossProjectID            string    `xml:"cross_project_id"`
	TimeStats                 TimeStats `xml:"time_stats"`
	HostInfo                  HostInfo  `xml:"host_info"`
	DiskUsage                 DiskUsage `xml:"disk_usage"`
	// Coprocs are the host's coprocessors and the work asked of each;
	// only hosts with one send it (Coprocs.Resources reads it).
	Coprocs *Coprocs       `xml:"coprocs"`
	Results []ReportResult `xml:"result"`
	// HostFiles are the sticky files the client holds for the project,
	// listed in every request (client/cs_scheduler.cpp).
	HostFiles    []HostFile     `xml:"file_info"`
	AppVersions  []ClientAppVer `xml:"app_versions>app_version"`
	OtherResults []OtherResult  `xml:"other_results>other_result,omitempty"`
	// HasOtherResults says the request had an <other_results> element, even
	// an empty one. Only then does an empty OtherResults mean "the host has
	// no tasks in progress", which the scheduler needs before it resends
	// tasks it thinks were lost. WriteSchedulerRequest writes the element
	// when this is set or OtherResults is not empty.
	HasOtherResults bool `xml:"-"`
	// ReportsLeft counts the reports past the parser's limits: not in
	// Results, so not acked, and reported again by the client.
	ReportsLeft       int        `xml:"-"`
	InProgressResults []IPResult `xml:"in_progress_results>ip_result,omitempty"`
	// MsgsFromHost are the trickle-up messages the client holds; it sends
	// each again until a reply has <message_ack/>.
	MsgsFromHost []MsgFromHost `xml:"msg_from_host"`
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
	Timezone       int     `xml:"timezone"`
	DomainName     string  `xml:"domain_name"`
	IPAddr         string  `xml:"ip_addr"`
	HostCPID       string  `xml:"host_cpid"`
	PNCPUs         int     `xml:"p_ncpus"`
	PVendor        string  `xml:"p_vendor"`
	PModel         string  `xml:"p_model"`
	PFeatures      string  `xml:"p_features"`
	PFpops         float64 `xml:"p_fpops"`
	PIops          float64 `xml:"p_iops"`
	PMembw         float64 `xml:"p_membw"`
	PCalculated    float64 `xml:"p_calculated"`
	MNbytes        float64 `xml:"m_nbytes"`
	MCache         float64 `xml:"m_cache"`
	MSwap          float64 `xml:"m_swap"`
	DTotal         float64 `xml:"d_total"`
	DFree          float64 `xml:"d_free"`
	OSName         string  `xml:"os_name"`
	OSVersion      string  `xml:"os_version"`
	NUsableCoprocs int     `xml:"n_usable_coprocs"`
}

// TimeStats is the client's <time_stats>.
type TimeStats struct {
	OnFrac                     float64 `xml:"on_frac"`
	ConnectedFrac              float64 `xml:"connected_frac"`
	CPUAndNetworkAvailableFrac float64 `xml:"cpu_and_network_available_frac"`
	ActiveFrac                 float64 `xml:"active_frac"`
	GPUActiveFrac              float64 `xml:"gpu_active_frac"`
	ClientStartTime            float64 `xml:"client_start_time,omitempty"`
	Now                        float64 `xml:"now,omitempty"`
}

// DiskUsage is the client's <disk_usage>, in bytes.
type DiskUsage struct {
	DBoincUsedTotal   float64 `xml:"d_boinc_used_total"`
	DBoincUsedProject float64 `xml:"d_boinc_used_project"`
	DProjectShare     float64 `xml:"d_project_share"`
}

// ReportResult is a completed task in a request's <result> (PROTOCOL.md
// §9.1).
type ReportResult struct {
	Name                    string  `xml:"name"`
	FinalCPUTime            float64 `xml:"final_cpu_time"`
	FinalElapsedTime        float64 `xml:"final_elapsed_time"`
	ExitStatus              int     `xml:"exit_status"`
	State                   int     `xml:"state"`
	Platform                string  `xml:"platform"`
	VersionNum              int     `xml:"version_num"`
	PlanClass               string  `xml:"plan_class,omitempty"`
	FinalPeakWorkingSetSize float64 `xml:"final_peak_working_set_size,omitempty"`
	FinalPeakSwapSize       float64 `xml:"final_peak_swap_size,omitempty"`
	FinalPeakDiskUsage      float64 `xml:"final_peak_disk_usage,omitempty"`
	FinalBytesSent          float64 `xml:"final_bytes_sent,omitempty"`
	FinalBytesReceived      float64 `xml:"final_bytes_received,omitempty"`
	AppVersionNum           int     `xml:"app_version_num"`
	// StderrOut is the element's content with CDATA unwrapped: the
	// <core_client_version>, any client <message> and the <stderr_txt>.
	StderrOut string           `xml:"stderr_out"`
	FileInfos []ReportFileInfo `xml:"file_info"`
}

// ReportFileInfo is an uploaded output file listed in a reported result.
type ReportFileInfo struct {
	Name      string  `xml:"name"`
	Nbytes    float64 `xml:"nbytes"`
	MaxNbytes float64 `xml:"max_nbytes"`
	MD5Cksum  string  `xml:"md5_cksum"`
	UploadURL string  `xml:"upload_url,omitempty"`
	// ErrorMsg is set when the upload failed; the client still reports
	// success in that case (PROTOCOL.md §8.5).
	ErrorMsg string `xml:"error_msg,omitempty"`
}

// HostFile is a sticky file the client holds or is downloading: a
// <file_info> at the top of a request. Status is the client's file status:
// FilePresent once the file is downloaded and verified, 0 while it is not
// (yet), negative after an error.
type HostFile struct {
	Name   string  `xml:"name"`
	Nbytes float64 `xml:"nbytes"`
	Status int     `xml:"status"`
}

// FilePresent is the client's FILE_PRESENT status: the file is on the host,
// verified.
const FilePresent = 1

// ClientAppVer is one app version the client has (<app_versions><app_version>).
// OtherResult.AppVersion indexes the request's list of these.
type ClientAppVer struct {
	AppName    string  `xml:"app_name"`
	VersionNum int     `xml:"version_num"`
	Platform   string  `xml:"platform"`
	PlanClass  string  `xml:"plan_class,omitempty"`
	AvgNCPUs   float64 `xml:"avg_ncpus"`
	Flops      float64 `xml:"flops"`
	APIVersion string  `xml:"api_version,omitempty"`
	Cmdline    string  `xml:"cmdline,omitempty"`
	// Coprocs are the coprocessors a task of the build uses, as its
	// app_info.xml declares them.
	Coprocs []CoprocUsage `xml:"coproc"`
}

// OtherResult is a task the client has in progress (<other_results>).
type OtherResult struct {
	Name       string `xml:"name"`
	AppVersion int    `xml:"app_version"`
	PlanClass  string `xml:"plan_class,omitempty"`
}

// IPResult is one <in_progress_results><ip_result>.
type IPResult struct {
	Name           string  `xml:"name"`
	ReportDeadline float64 `xml:"report_deadline"`
	TimeRemaining  float64 `xml:"time_remaining"`
	AvgNCPUs       float64 `xml:"avg_ncpus"`
}

// SchedulerReply is the server's <scheduler_reply> (PROTOCOL.md §4).
type SchedulerReply struct {
	XMLName          xml.Name  `xml:"scheduler_reply"`
	SchedulerVersion int       `xml:"scheduler_version,omitempty"`
	MasterURL        string    `xml:"master_url,omitempty"`
	ProjectName      string    `xml:"project_name,omitempty"`
	RequestDelay     float64   `xml:"request_delay,omitempty"`
	NextRPCDelay     float64   `xml:"next_rpc_delay,omitempty"`
	Messages         []Message `xml:"message"`
	// ProjectIsDown makes the client treat the RPC as failed and back off.
	ProjectIsDown *Empty `xml:"project_is_down"`
	// Overloaded says this reply carries no work because the server is
	// busy (its database, or the request was over its rate limit), not
	// because it has none: a client that knows the element keeps
	// asking after request_delay without backing its work fetch off or
	// freezing the project's debt. The real client ignores it and, as
	// before, treats the reply as one without work.
	Overloaded       *Empty  `xml:"overloaded"`
	UserID           int64   `xml:"userid,omitempty"`
	UserName         string  `xml:"user_name,omitempty"`
	UserTotalCredit  float64 `xml:"user_total_credit,omitempty"`
	UserExpavgCredit float64 `xml:"user_expavg_credit,omitempty"`
	UserCreateTime   int64   `xml:"user_create_time,omitempty"`
	TeamID           int64   `xml:"teamid,omitempty"`
	TeamName         string  `xml:"team_name,omitempty"`
	// HasTeamName writes <team_name> even when empty, as BOINC's scheduler
	// does for a user in no team: the client keeps the last name it was
	// sent, so a volunteer who left a team would go on seeing it.
	HasTeamName    bool   `xml:"-"`
	EmailHash      string `xml:"email_hash,omitempty"`
	CrossProjectID string `xml:"cross_project_id,omitempty"`
	ExternalCPID   string `xml:"external_cpid,omitempty"`
	// HostID must be sent when the request's hostid was 0.
	HostID           int64   `xml:"hostid,omitempty"`
	HostTotalCredit  float64 `xml:"host_total_credit,omitempty"`
	HostExpavgCredit float64 `xml:"host_expavg_credit,omitempty"`
	HostCreateTime   int64   `xml:"host_create_time,omitempty"`
	HostVenue        string  `xml:"host_venue,omitempty"`
	// CodeSignKey is sent only when the request had none (PROTOCOL.md §5.2).
	CodeSignKey string `xml:"code_sign_key,omitempty"`
	// CodeSignKeySignature signs a new CodeSignKey with the old private key.
	CodeSignKeySignature  string `xml:"code_sign_key_signature,omitempty"`
	GlobalPreferences     RawXML `xml:"global_preferences,omitempty"`
	ProjectPreferences    RawXML `xml:"project_preferences,omitempty"`
	SendFullWorkload      *Empty `xml:"send_full_workload"`
	VerifyFilesOnAppStart *Empty `xml:"verify_files_on_app_start"`
	// NoRscApps names resources ("CPU", "NVIDIA", ...) the project has no
	// apps for, so the client stops asking for that kind of work.
	NoRscApps       []string      `xml:"no_rsc_apps"`
	Apps            []App         `xml:"app"`
	FileInfos       []FileInfo    `xml:"file_info"`
	AppVersions     []AppVersion  `xml:"app_version"`
	Workunits       []Workunit    `xml:"workunit"`
	Results         []Result      `xml:"result"`
	ResultAcks      []NameElement `xml:"result_ack"`
	ResultAborts    []NameElement `xml:"result_abort"`
	ResultAbortsINS []NameElement `xml:"result_abort_if_not_started"`
	// MessageAck tells the client every trickle-up message of the request
	// is stored: it deletes them (all of them, so it is sent only when
	// every one is).
	MessageAck *Empty `xml:"message_ack"`
	// TrickleDowns are read by ParseSchedulerReply; the server writes its
	// stored messages through Raw.
	TrickleDowns []TrickleDown `xml:"trickle_down"`
	// DeleteFileInfos clears the sticky flag of files the client holds.
	DeleteFileInfos []string `xml:"delete_file_info"`
	// Raw fragments are written verbatim inside the reply, after everything
	// else: stored XML such as an app version's xml_doc
	// ("<file_info>…</file_info><app_version>…</app_version>"). The client
	// links entities after reading the whole reply, so position does not
	// matter. ParseSchedulerReply never fills Raw: what is in it comes back
	// as Apps, FileInfos, AppVersions and so on.
	Raw []string `xml:"-"`
}

// Empty is a flag element written as <x/>.
type Empty struct{}

// Message is a <message priority="...">text</message>; priority is "low",
// "high" or "notice" (a notice is also shown in the Manager).
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
	Name string `xml:"name"`
	// URLs are tried in order; one containing "file_upload_handler" is an
	// upload URL, any other a download URL.
	URLs []string `xml:"url"`
	// UploadURLs are explicit upload URLs, an alternative to URLs.
	UploadURLs []string `xml:"upload_url"`
	Executable *Empty   `xml:"executable"`
	// GzippedURLs are where the gzip'd copy of a download is: a client
	// given any downloads from them only (they replace URLs), to NAME.gz,
	// and gunzips it to NAME (client/client_types.cpp, FILE_INFO::parse).
	GzippedURLs []string `xml:"gzipped_url"`
	MD5Cksum    string   `xml:"md5_cksum,omitempty"`
	// Nbytes and MD5Cksum are those of the file itself, uncompressed: the
	// client checks them after gunzipping a gzip'd download.
	Nbytes float64 `xml:"nbytes,omitempty"`
	// GzippedNbytes is the size of the gzip'd copy.
	GzippedNbytes float64 `xml:"gzipped_nbytes,omitempty"`
	MaxNbytes     float64 `xml:"max_nbytes,omitempty"`
	// FileSignature is required on every app version file.
	FileSignature string `xml:"file_signature,omitempty"`
	// XMLSignature is the upload certificate of an output file.
	XMLSignature string `xml:"xml_signature,omitempty"`
	Sticky       *Empty `xml:"sticky"`
	NoDelete     *Empty `xml:"no_delete"`
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
	AppName    string  `xml:"app_name"`
	VersionNum int     `xml:"version_num"`
	Platform   string  `xml:"platform,omitempty"`
	PlanClass  string  `xml:"plan_class,omitempty"`
	AvgNCPUs   float64 `xml:"avg_ncpus,omitempty"`
	MaxNCPUs   float64 `xml:"max_ncpus,omitempty"`
	// Flops is the speed the client is to assume for the version on this
	// host: its runtime estimates are rsc_fpops_est / Flops.
	Flops      float64 `xml:"flops,omitempty"`
	APIVersion string  `xml:"api_version,omitempty"`
	Cmdline    string  `xml:"cmdline,omitempty"`
	// Coprocs are the coprocessors a task of the version uses.
	Coprocs  []CoprocUsage `xml:"coproc"`
	FileRefs []FileRef     `xml:"file_ref"`
}

// CoprocUsage is an app version's <coproc>: how many instances of a
// resource one task uses (0.5: two tasks share a GPU).
type CoprocUsage struct {
	Type  string  `xml:"type"`
	Count float64 `xml:"count"`
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
