package protocol

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const samples = "testdata/samples"

func readSample(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(samples, name))
	if err != nil {
		tb.Skipf("protocol sample not available: %v", err)
	}
	return b
}

// httpBody strips the request line and headers from a captured .http file.
func httpBody(tb testing.TB, name string) []byte {
	tb.Helper()
	b := readSample(tb, name)
	i := bytes.Index(b, []byte("\n\n"))
	if i < 0 {
		tb.Fatalf("sample %s has no blank line after the headers", name)
	}
	return b[i+2:]
}

func parseSample(t *testing.T, name string) *SchedulerRequest {
	t.Helper()
	req, err := ParseSchedulerRequest(bytes.NewReader(readSample(t, name)))
	if err != nil {
		t.Fatalf("ParseSchedulerRequest(%s) error %v", name, err)
	}
	return req
}

const (
	sampleAuth = "0123456789abcdef0123456789abcdef"
	sampleOut  = "wu_upper_1_0_r0_out"
	linux      = "x86_64-pc-linux-gnu"
)

var sampleAppVersion = ClientAppVer{AppName: "upper", VersionNum: 100, Platform: linux, AvgNCPUs: 1, Flops: 1e9}

func TestParseSchedulerRequestSamples(t *testing.T) {
	t.Parallel()
	okFile := ReportFileInfo{Name: sampleOut, Nbytes: 23, MaxNbytes: 100000,
		MD5Cksum: "cc4b471dacedcb39d73c6fa176272933", UploadURL: "http://127.0.0.1:8080/myproject_cgi/file_upload_handler"}
	failedFile := okFile
	failedFile.ErrorMsg = "permanent upload error"
	report := func(exit, state int, files ...ReportFileInfo) ReportResult {
		return ReportResult{Name: "wu_upper_1_0", ExitStatus: exit, State: state, Platform: linux,
			VersionNum: 100, AppVersionNum: 100, FileInfos: files}
	}
	for _, tc := range []struct {
		file        string
		hostID      int64
		seqno       int64
		workReq     float64
		instances   float64
		platform    string
		hasKey      bool
		crossID     string
		results     []ReportResult
		stderr      []string // substrings of each result's stderr_out
		others      []OtherResult
		appVersions []ClientAppVer
		cpid        string
	}{
		{file: "02_scheduler_request_first_rpc.body.xml", workReq: 1, platform: linux,
			cpid: "2f5059bf76b7983d47a6084575a9b1cc"},
		{file: "05_scheduler_request_work_fetch_with_other_results.body.xml", hostID: 7, workReq: 103680,
			instances: 2, platform: linux, hasKey: true, crossID: "00112233445566778899aabbccddeeff",
			others: []OtherResult{{Name: "wu_upper_1_0", AppVersion: 0}}, appVersions: []ClientAppVer{sampleAppVersion},
			cpid: "2f5059bf76b7983d47a6084575a9b1cc"},
		{file: "09_scheduler_request_reporting_result.body.xml", hostID: 7, seqno: 1, workReq: 103680,
			instances: 2, platform: linux, hasKey: true, crossID: "00112233445566778899aabbccddeeff",
			results: []ReportResult{report(0, 5, okFile)}, stderr: []string{"<stderr_txt>\napp started in /var/lib/boinc-client/slots/0 args:"},
			appVersions: []ClientAppVer{sampleAppVersion}, cpid: "2f5059bf76b7983d47a6084575a9b1cc"},
		{file: "17_scheduler_request_anonymous_platform.body.xml", workReq: 1, platform: "anonymous",
			appVersions: []ClientAppVer{sampleAppVersion}, cpid: "375e9a52fa62bd3a59803514c9d20e43"},
		{file: "22_scheduler_request_report_download_error_unsigned_app.body.xml", hostID: 7, seqno: 1, workReq: 103680,
			instances: 1, platform: linux, hasKey: true, crossID: "00112233445566778899aabbccddeeff",
			results: []ReportResult{report(-186, 1)}, stderr: []string{"<error_code>-123 (no signature)</error_code>"},
			appVersions: []ClientAppVer{sampleAppVersion}, cpid: "375e9a52fa62bd3a59803514c9d20e43"},
		{file: "23_scheduler_request_report_compute_error_exit3.body.xml", hostID: 7, workReq: 103680,
			instances: 2, platform: linux, hasKey: true, crossID: "00112233445566778899aabbccddeeff",
			results: []ReportResult{report(3, 3)}, stderr: []string{"process exited with code 3 (0x3, -253)</message>\n<stderr_txt>\nabout to fail"},
			appVersions: []ClientAppVer{sampleAppVersion}, cpid: "375e9a52fa62bd3a59803514c9d20e43"},
		{file: "24_scheduler_request_report_after_permanent_upload_error.body.xml", hostID: 7, seqno: 1, workReq: 103680,
			instances: 2, platform: linux, hasKey: true, crossID: "00112233445566778899aabbccddeeff",
			results: []ReportResult{report(0, 5, failedFile)}, stderr: []string{"<core_client_version>7.20.5</core_client_version>"},
			appVersions: []ClientAppVer{sampleAppVersion}, cpid: "375e9a52fa62bd3a59803514c9d20e43"},
	} {
		t.Run(tc.file[:2], func(t *testing.T) {
			t.Parallel()
			req := parseSample(t, tc.file)
			if req.Authenticator != sampleAuth || req.HostID != tc.hostID || req.RPCSeqno != tc.seqno ||
				req.WorkReqSeconds != tc.workReq || req.CPUReqSecs != tc.workReq ||
				req.CPUReqInstances != tc.instances || req.PlatformName != tc.platform {
				t.Errorf("got auth %q hostid %d seqno %d work_req %v cpu_req %v instances %v platform %q;\n"+
					"want %q %d %d %v %v %v %q", req.Authenticator, req.HostID, req.RPCSeqno, req.WorkReqSeconds,
					req.CPUReqSecs, req.CPUReqInstances, req.PlatformName,
					sampleAuth, tc.hostID, tc.seqno, tc.workReq, tc.workReq, tc.instances, tc.platform)
			}
			if req.CoreClientMajorVersion != 7 || req.CoreClientMinorVersion != 20 || req.CoreClientRelease != 5 {
				t.Errorf("client version %d.%d.%d, want 7.20.5", req.CoreClientMajorVersion,
					req.CoreClientMinorVersion, req.CoreClientRelease)
			}
			if got := strings.HasPrefix(req.CodeSignKey, "1024\nce060d228b04febb"); got != tc.hasKey {
				t.Errorf("code_sign_key = %q, want a key: %v", req.CodeSignKey, tc.hasKey)
			}
			if req.CrossProjectID != tc.crossID {
				t.Errorf("cross_project_id = %q, want %q", req.CrossProjectID, tc.crossID)
			}
			if req.HostInfo.HostCPID != tc.cpid || req.HostInfo.PNCPUs != 2 || req.HostInfo.PFpops != 1e9 ||
				req.HostInfo.OSName != "Linux Debian" || !strings.Contains(req.HostInfo.PFeatures, " avx2 ") {
				t.Errorf("host_info = %+v, want cpid %s, 2 CPUs, 1e9 fpops, Linux Debian, avx2", req.HostInfo, tc.cpid)
			}
			if req.TimeStats.OnFrac != 1 || req.TimeStats.ConnectedFrac != -1 {
				t.Errorf("time_stats = %+v, want on_frac 1, connected_frac -1", req.TimeStats)
			}
			if !strings.Contains(req.WorkingGlobalPreferences.Inner, "<work_buf_min_days>0.100000</work_buf_min_days>") {
				t.Errorf("working_global_preferences = %q, want the raw prefs", req.WorkingGlobalPreferences.Inner)
			}
			if len(req.Results) != len(tc.results) {
				t.Fatalf("got %d results, want %d", len(req.Results), len(tc.results))
			}
			for i, r := range req.Results {
				if !strings.Contains(r.StderrOut, tc.stderr[i]) || strings.Contains(r.StderrOut, "CDATA") {
					t.Errorf("result %d stderr_out = %q, want it to contain %q, CDATA unwrapped", i, r.StderrOut, tc.stderr[i])
				}
				r.StderrOut = ""
				if !reflect.DeepEqual(r, tc.results[i]) {
					t.Errorf("result %d = %+v\nwant %+v", i, r, tc.results[i])
				}
			}
			if !req.HasOtherResults || !reflect.DeepEqual(req.OtherResults, tc.others) {
				t.Errorf("other_results = %v %+v, want present with %+v", req.HasOtherResults, req.OtherResults, tc.others)
			}
			if !reflect.DeepEqual(req.AppVersions, tc.appVersions) {
				t.Errorf("app_versions = %+v, want %+v", req.AppVersions, tc.appVersions)
			}
		})
	}
}

func TestParseSchedulerRequestLenient(t *testing.T) {
	t.Parallel()
	wrap := func(inner string) string { return "<scheduler_request>\n" + inner + "\n</scheduler_request>\n" }
	for _, tc := range []struct {
		name string
		body string
		want func(*SchedulerRequest) bool
	}{
		{"unescaped ampersand", wrap("<authenticator>a&b c</authenticator>"),
			func(r *SchedulerRequest) bool { return r.Authenticator == "a&b c" }},
		{"unescaped less-than", wrap("<authenticator>a<b</authenticator>"),
			func(r *SchedulerRequest) bool { return r.Authenticator == "a<b" }},
		{"less-than and space", wrap("<authenticator>x < y</authenticator><hostid>3</hostid>"),
			func(r *SchedulerRequest) bool { return r.Authenticator == "x < y" && r.HostID == 3 }},
		{"escaped entities", wrap("<authenticator>&lt;a&amp;b&gt;&#65;&#x42;&bogus;</authenticator>"),
			func(r *SchedulerRequest) bool { return r.Authenticator == "<a&b>AB&bogus;" }},
		{"white space trimmed", wrap("<authenticator>\n  abc \n</authenticator>"),
			func(r *SchedulerRequest) bool { return r.Authenticator == "abc" }},
		{"declaration and junk first", "<?xml version=\"1.0\"?>\ngarbage <b>x</b>\n" + wrap("<hostid>12</hostid>"),
			func(r *SchedulerRequest) bool { return r.HostID == 12 }},
		{"unknown elements ignored", wrap("<new_thing><hostid>99</hostid></new_thing><hostid>4</hostid>"),
			func(r *SchedulerRequest) bool { return r.HostID == 4 }},
		{"unclosed child closed by parent", wrap("<result><name>r1<exit_status>-5</exit_status></result><hostid>5</hostid>"),
			func(r *SchedulerRequest) bool { return len(r.Results) == 1 && r.HostID == 5 }},
		{"stray close tag", wrap("</result><hostid>6</hostid>"),
			func(r *SchedulerRequest) bool { return r.HostID == 6 }},
		{"comment", wrap("<!-- <hostid>1</hostid> --><hostid>2</hostid>"),
			func(r *SchedulerRequest) bool { return r.HostID == 2 }},
		{"float written for int", wrap("<hostid>7.000000</hostid><rpc_seqno>x</rpc_seqno>"),
			func(r *SchedulerRequest) bool { return r.HostID == 7 && r.RPCSeqno == 0 }},
		{"non-finite numbers are zero", wrap("<work_req_seconds>NaN</work_req_seconds><cpu_req_secs>inf</cpu_req_secs><hostid>1e300</hostid>"),
			func(r *SchedulerRequest) bool { return r.WorkReqSeconds == 0 && r.CPUReqSecs == 0 && r.HostID == 0 }},
		{"no other_results element", wrap("<hostid>1</hostid>"),
			func(r *SchedulerRequest) bool { return !r.HasOtherResults && r.OtherResults == nil }},
		{"empty other_results element", wrap("<other_results/>"),
			func(r *SchedulerRequest) bool { return r.HasOtherResults && len(r.OtherResults) == 0 }},
		{"alt platforms", wrap("<alt_platform><name>i686-pc-linux-gnu</name></alt_platform><alt_platform>\n<name>x</name></alt_platform>"),
			func(r *SchedulerRequest) bool {
				return len(r.AltPlatforms) == 2 && r.AltPlatforms[0].Name == "i686-pc-linux-gnu" && r.AltPlatforms[1].Name == "x"
			}},
		{"attributes ignored", wrap(`<hostid a="1" b='>'>8</hostid>`),
			func(r *SchedulerRequest) bool { return r.HostID == 8 }},
	} {
		req, err := ParseSchedulerRequest(strings.NewReader(tc.body))
		if err != nil {
			t.Errorf("%s: ParseSchedulerRequest(%q) error %v", tc.name, tc.body, err)
			continue
		}
		if !tc.want(req) {
			t.Errorf("%s: ParseSchedulerRequest(%q) = %+v, not what was wanted", tc.name, tc.body, req)
		}
	}
}

func TestParseSchedulerRequestRefuses(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxBytes: 1000, MaxDepth: 8, MaxElements: 50}
	deep := "<scheduler_request>" + strings.Repeat("<a>", 9) + "</scheduler_request>"
	unclosedDeep := "<scheduler_request>" + strings.Repeat("<hostid>", 20)
	many := "<scheduler_request>" + strings.Repeat("<a/>", 51) + "</scheduler_request>"
	big := "<scheduler_request>" + strings.Repeat(" ", 1000) + "</scheduler_request>"
	for _, tc := range []struct {
		name string
		body string
		want error
	}{
		{"too deep", deep, ErrTooDeep},
		{"unclosed opens", unclosedDeep, ErrTooDeep},
		{"too many elements", many, ErrTooLarge},
		{"too many bytes", big, ErrTooLarge},
		{"empty", "", ErrMalformed},
		{"no root", "<scheduler_reply></scheduler_reply>", ErrMalformed},
		{"cut off", "<scheduler_request><hostid>1</hostid><other_results><other_result><name>a</name>", ErrMalformed},
	} {
		_, err := ParseSchedulerRequestLimits(strings.NewReader(tc.body), lim)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: ParseSchedulerRequestLimits() error %v, want %v", tc.name, err, tc.want)
		}
	}
	// At the limit exactly is fine.
	ok := "<scheduler_request>" + strings.Repeat("<a>", 7) + strings.Repeat("</a>", 7) + "</scheduler_request>"
	if _, err := ParseSchedulerRequestLimits(strings.NewReader(ok), lim); err != nil {
		t.Errorf("ParseSchedulerRequestLimits(depth 8) error %v, want nil", err)
	}
}

// TestSchedulerRequestRoundTrip checks the client-side writer: what it
// writes parses back to the same request.
func TestSchedulerRequestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"02_scheduler_request_first_rpc.body.xml",
		"05_scheduler_request_work_fetch_with_other_results.body.xml",
		"09_scheduler_request_reporting_result.body.xml",
		"17_scheduler_request_anonymous_platform.body.xml",
		"23_scheduler_request_report_compute_error_exit3.body.xml",
		"24_scheduler_request_report_after_permanent_upload_error.body.xml",
	} {
		req := parseSample(t, name)
		var b bytes.Buffer
		if err := WriteSchedulerRequest(&b, req); err != nil {
			t.Fatalf("WriteSchedulerRequest(%s) error %v", name, err)
		}
		got, err := ParseSchedulerRequest(&b)
		if err != nil {
			t.Fatalf("ParseSchedulerRequest(WriteSchedulerRequest(%s)) error %v", name, err)
		}
		if !reflect.DeepEqual(got, req) {
			t.Errorf("round trip of %s changed the request:\n got %+v\nwant %+v", name, got, req)
		}
	}
	// Without the flag, an empty list writes no <other_results>.
	var b bytes.Buffer
	if err := WriteSchedulerRequest(&b, &SchedulerRequest{Authenticator: "a"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "other_results") || !strings.Contains(b.String(), "<app_versions>\n</app_versions>") {
		t.Errorf("WriteSchedulerRequest(no other results) =\n%s\nwant no <other_results>, an empty <app_versions>", b.String())
	}
}

// fullReply sets every element the server sends.
func fullReply() *SchedulerReply {
	sig := "2ecb3ce25aab36029ffe0ee65a04888dd71a6d7daa859d5e6be655a199e2e95a\n721e27a949f9df5660d56e35f86201c10aeb537dcaf59aa840f47e1981bad4c2\n."
	key := "1024\nce060d228b04febbcceae39eb8dfa8b8d3688c15d5a67025ba8d88e519cd39ac\n."
	return &SchedulerReply{
		SchedulerVersion: 718,
		MasterURL:        "http://127.0.0.1:8080/proj/",
		ProjectName:      "Test & <Project>",
		RequestDelay:     30,
		NextRPCDelay:     3600.5,
		Messages: []Message{{Priority: "low", Text: "No tasks are available for \"upper\""},
			{Priority: "notice", Text: "line one\nline two & more"}},
		ProjectIsDown:         &Empty{},
		UserID:                1,
		UserName:              "tester",
		UserTotalCredit:       12.5,
		UserExpavgCredit:      0.25,
		UserCreateTime:        1700000000,
		TeamID:                3,
		TeamName:              "team",
		EmailHash:             "0f0f",
		CrossProjectID:        "00112233445566778899aabbccddeeff",
		ExternalCPID:          "ffee",
		HostID:                7,
		HostTotalCredit:       1,
		HostExpavgCredit:      2,
		HostCreateTime:        1700000001,
		HostVenue:             "home",
		CodeSignKey:           key,
		CodeSignKeySignature:  sig,
		GlobalPreferences:     RawXML{Inner: "<mod_time>1</mod_time>"},
		ProjectPreferences:    RawXML{Inner: "<color>blue</color>"},
		SendFullWorkload:      &Empty{},
		VerifyFilesOnAppStart: &Empty{},
		NoRscApps:             []string{"NVIDIA", "ATI"},
		Apps:                  []App{{Name: "upper", UserFriendlyName: "Uppercase"}},
		FileInfos: []FileInfo{
			{Name: "upper_1.00.sh", URLs: []string{"http://h.x/download/1a/upper_1.00.sh?a=1&b=2"},
				Executable: &Empty{}, MD5Cksum: "0d749965cfe1604be63d2ee76d01585a", Nbytes: 183, FileSignature: sig},
			{Name: "in_1", URLs: []string{"http://h.x/download/2/in_1", "http://mirror.x/in_1"}, Nbytes: 18, Sticky: &Empty{}, NoDelete: &Empty{}},
			{Name: "in_2", URLs: []string{"http://h.x/download/3/in_2"}, GzippedURLs: []string{"http://h.x/download/3/in_2.gz"},
				MD5Cksum: "0d749965cfe1604be63d2ee76d01585a", Nbytes: 4096, GzippedNbytes: 60},
			{Name: "r_0_0", URLs: []string{"http://h.x/file_upload_handler"}, UploadURLs: []string{"http://h.x/up"},
				MaxNbytes: 100000, XMLSignature: sig},
		},
		AppVersions: []AppVersion{{AppName: "upper", VersionNum: 100, Platform: linux, PlanClass: "mt",
			AvgNCPUs: 1.5, Flops: 1.25e9, APIVersion: "7.20.0", Cmdline: "--x",
			FileRefs: []FileRef{{FileName: "upper_1.00.sh", OpenName: "upper", MainProgram: &Empty{}, CopyFile: &Empty{}}}}},
		Workunits: []Workunit{{Name: "wu_1", AppName: "upper", VersionNum: 100, CommandLine: "-n 3 <in",
			RscFpopsEst: 1e9, RscFpopsBound: 1e12, RscMemoryBound: 1e8, RscDiskBound: 1e9,
			FileRefs: []FileRef{{FileName: "in_1", OpenName: "in", CopyFile: &Empty{}}}}},
		Results: []Result{{Name: "r_0", WUName: "wu_1", Platform: linux, VersionNum: 100, PlanClass: "mt",
			ReportDeadline: 1795823420, ReportImmediately: &Empty{},
			FileRefs: []FileRef{{FileName: "r_0_0", OpenName: "out", CopyFile: &Empty{}, Optional: &Empty{}}}}},
		ResultAcks:      []NameElement{{Name: "old_1"}, {Name: "old_2"}},
		ResultAborts:    []NameElement{{Name: "bad_1"}},
		ResultAbortsINS: []NameElement{{Name: "bad_2"}},
		DeleteFileInfos: []string{"sticky_1"},
	}
}

func TestSchedulerReplyRoundTrip(t *testing.T) {
	t.Parallel()
	rep := fullReply()
	rawFile := "<file_info>\n    <name>lib.so</name>\n    <url>http://h.x/download/3/lib.so</url>\n" +
		"    <file_signature>\nabcd\n.\n</file_signature>\n</file_info>\n"
	rawVersion := "<app_version>\n    <app_name>upper</app_name>\n    <version_num>101</version_num>\n" +
		"    <file_ref>\n        <file_name>lib.so</file_name>\n        <main_program/>\n    </file_ref>\n</app_version>"
	rep.Raw = []string{rawFile + rawVersion}
	var b bytes.Buffer
	if err := WriteSchedulerReply(&b, rep); err != nil {
		t.Fatalf("WriteSchedulerReply() error %v", err)
	}
	text := b.String()
	for _, want := range []string{
		"<scheduler_reply>\n", "</scheduler_reply>\n",
		"<project_is_down/>", "<executable/>", "<main_program/>", "<report_immediately/>",
		"<file_signature>\n2ecb3ce25aab36029ffe0ee65a04888dd71a6d7daa859d5e6be655a199e2e95a\n721e27a9",
		"\n.\n</file_signature>", "<code_sign_key>\n1024\nce060d22", "<xml_signature>\n2ecb",
		`<message priority="low">No tasks are available for "upper"</message>`,
		"<project_name>Test &amp; &lt;Project&gt;</project_name>",
		"<url>http://h.x/download/1a/upper_1.00.sh?a=1&amp;b=2</url>",
		"<report_deadline>1795823420</report_deadline>", "<rsc_fpops_est>1000000000</rsc_fpops_est>",
		"<flops>1250000000</flops>", "<next_rpc_delay>3600.5</next_rpc_delay>",
		"<gzipped_url>http://h.x/download/3/in_2.gz</gzipped_url>", "<gzipped_nbytes>60</gzipped_nbytes>",
		rawFile + rawVersion + "\n</scheduler_reply>\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("WriteSchedulerReply() output lacks %q:\n%s", want, text)
		}
	}
	if !strings.HasPrefix(text, "<scheduler_reply>\n") || strings.Contains(text, "&#") {
		t.Errorf("WriteSchedulerReply() output should start with <scheduler_reply> and use no character references:\n%s", text)
	}
	got, err := ParseSchedulerReply(strings.NewReader(text))
	if err != nil {
		t.Fatalf("ParseSchedulerReply(WriteSchedulerReply()) error %v", err)
	}
	want := fullReply()
	// Raw fragments come back as entities; block elements come back trimmed.
	want.FileInfos = append(want.FileInfos, FileInfo{Name: "lib.so", URLs: []string{"http://h.x/download/3/lib.so"}, FileSignature: "abcd\n."})
	want.AppVersions = append(want.AppVersions, AppVersion{AppName: "upper", VersionNum: 101,
		FileRefs: []FileRef{{FileName: "lib.so", MainProgram: &Empty{}}}})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSchedulerReply(WriteSchedulerReply(r)) differs from r:\n got %+v\nwant %+v", got, want)
	}
}

func TestSchedulerReplyMinimal(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteSchedulerReply(&b, &SchedulerReply{ResultAcks: []NameElement{{Name: "r"}}}); err != nil {
		t.Fatal(err)
	}
	want := "<scheduler_reply>\n<result_ack>\n    <name>r</name>\n</result_ack>\n</scheduler_reply>\n"
	if b.String() != want {
		t.Errorf("WriteSchedulerReply(ack only) =\n%q\nwant\n%q", b.String(), want)
	}
}

// A reply for a user in no team carries an empty <team_name> (HasTeamName),
// as BOINC's does, so the client forgets a team the user left; a reply
// without the flag leaves the element out.
func TestSchedulerReplyEmptyTeamName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rep  SchedulerReply
		want string
	}{
		{SchedulerReply{UserID: 3, HasTeamName: true}, "<userid>3</userid>\n<team_name></team_name>\n"},
		{SchedulerReply{UserID: 3, TeamID: 9, TeamName: "A & B", HasTeamName: true},
			"<userid>3</userid>\n<teamid>9</teamid>\n<team_name>A &amp; B</team_name>\n"},
		{SchedulerReply{UserID: 3}, "<userid>3</userid>\n"},
	} {
		var b bytes.Buffer
		if err := WriteSchedulerReply(&b, &tt.rep); err != nil {
			t.Fatal(err)
		}
		if want := "<scheduler_reply>\n" + tt.want + "</scheduler_reply>\n"; b.String() != want {
			t.Errorf("WriteSchedulerReply(%+v) =\n%q\nwant\n%q", tt.rep, b.String(), want)
		}
	}
}

// TestParseSchedulerReplySamples reads the replies the real client accepted,
// and checks that writing them again loses nothing.
func TestParseSchedulerReplySamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file                           string
		apps, files, versions, wus, rs int
		acks                           int
		key                            bool
		hostID                         int64
		message                        string
	}{
		{"03_scheduler_reply_with_work_signed.xml", 1, 3, 1, 1, 1, 0, true, 7, ""},
		{"06_scheduler_reply_no_work.xml", 0, 0, 0, 0, 0, 0, true, 0, "No tasks are available for Uppercase test"},
		{"10_scheduler_reply_with_result_ack.xml", 0, 0, 0, 0, 0, 1, true, 0, "No tasks are available for Uppercase test"},
		{"15_scheduler_reply_minimal_that_worked.xml", 1, 3, 1, 1, 1, 0, true, 7, ""},
		{"18_scheduler_reply_for_anonymous_platform.xml", 0, 2, 0, 1, 1, 0, false, 7, ""},
		{"25_scheduler_reply_bad_authenticator.xml", 0, 0, 0, 0, 0, 0, false, 0, "Invalid or missing account key.  To fix, remove and add this project."},
	} {
		rep, err := ParseSchedulerReply(bytes.NewReader(readSample(t, tc.file)))
		if err != nil {
			t.Fatalf("ParseSchedulerReply(%s) error %v", tc.file, err)
		}
		if len(rep.Apps) != tc.apps || len(rep.FileInfos) != tc.files || len(rep.AppVersions) != tc.versions ||
			len(rep.Workunits) != tc.wus || len(rep.Results) != tc.rs || len(rep.ResultAcks) != tc.acks {
			t.Errorf("%s: got %d apps, %d files, %d versions, %d workunits, %d results, %d acks; want %d %d %d %d %d %d",
				tc.file, len(rep.Apps), len(rep.FileInfos), len(rep.AppVersions), len(rep.Workunits), len(rep.Results),
				len(rep.ResultAcks), tc.apps, tc.files, tc.versions, tc.wus, tc.rs, tc.acks)
		}
		if (rep.CodeSignKey != "") != tc.key || rep.HostID != tc.hostID {
			t.Errorf("%s: code_sign_key %q, hostid %d; want key %v, hostid %d", tc.file, rep.CodeSignKey, rep.HostID, tc.key, tc.hostID)
		}
		if tc.message != "" && (len(rep.Messages) != 1 || rep.Messages[0].Text != tc.message) {
			t.Errorf("%s: messages %+v, want %q", tc.file, rep.Messages, tc.message)
		}
		var b bytes.Buffer
		if err := WriteSchedulerReply(&b, rep); err != nil {
			t.Fatal(err)
		}
		again, err := ParseSchedulerReply(&b)
		if err != nil {
			t.Fatalf("ParseSchedulerReply(WriteSchedulerReply(%s)) error %v", tc.file, err)
		}
		if !reflect.DeepEqual(again, rep) {
			t.Errorf("%s: writing and reading again changed the reply:\n got %+v\nwant %+v", tc.file, again, rep)
		}
	}
	rep, _ := ParseSchedulerReply(bytes.NewReader(readSample(t, "03_scheduler_reply_with_work_signed.xml")))
	app := rep.FileInfos[0]
	if app.Executable == nil || app.Nbytes != 183 || !strings.HasPrefix(app.FileSignature, "4605b114") ||
		!strings.HasSuffix(app.FileSignature, "\n.") || rep.Results[0].ReportImmediately == nil ||
		rep.Workunits[0].FileRefs[0].CopyFile == nil || rep.AppVersions[0].FileRefs[0].MainProgram == nil {
		t.Errorf("sample 03 details lost: file %+v, result %+v", app, rep.Results[0])
	}
}

func TestParseSchedulerReplyNeedsCloseTag(t *testing.T) {
	t.Parallel()
	_, err := ParseSchedulerReply(strings.NewReader("<scheduler_reply>\n<hostid>7</hostid>\n"))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseSchedulerReply(no close tag) error %v, want ErrMalformed", err)
	}
}

// FuzzParseSchedulerRequest is seeded with every real client request in
// the samples (all *.body.xml), so plain go test replays them.
func FuzzParseSchedulerRequest(f *testing.F) {
	names, err := filepath.Glob(filepath.Join(samples, "*_scheduler_request_*.body.xml"))
	if err != nil || len(names) < 7 {
		f.Fatalf("scheduler request samples: %d found (%v), want the 7 recorded ones", len(names), err)
	}
	for _, name := range names {
		f.Add(readSample(f, filepath.Base(name)))
	}
	f.Add([]byte("<scheduler_request><authenticator>a<b&c</authenticator><result><name>x</result></scheduler_request>"))
	// Past each limit, so that the seed run in make test sees the refusals.
	f.Add([]byte("<scheduler_request>" + strings.Repeat("<a>", 17) + "</scheduler_request>"))
	f.Add([]byte("<scheduler_request>" + strings.Repeat("<a/>", 5001) + "</scheduler_request>"))
	f.Add([]byte("<scheduler_request>" + strings.Repeat("x", 1<<20) + "</scheduler_request>"))
	lim := Limits{MaxBytes: 1 << 20, MaxDepth: 16, MaxElements: 5000}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseSchedulerRequestLimits(bytes.NewReader(body), lim)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseSchedulerRequestLimits(%q) error %v, want one of the package's errors", body, err)
			}
			return
		}
		// Whatever was read can be written, and reads back the same.
		var b bytes.Buffer
		if err := WriteSchedulerRequest(&b, req); err != nil {
			t.Fatal(err)
		}
		again, err := ParseSchedulerRequestLimits(bytes.NewReader(b.Bytes()), Limits{MaxBytes: 1 << 22, MaxDepth: 64, MaxElements: 1 << 20})
		if err != nil {
			t.Fatalf("parse of rewritten request failed: %v\n%s", err, b.Bytes())
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("rewritten request reads back differently:\n got %+v\nwant %+v\nwritten:\n%s", again, req, b.Bytes())
		}
	})
}
