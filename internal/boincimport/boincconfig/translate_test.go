package boincconfig

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/fanout"
)

// translate runs Translate over a <config> body and daemons.
func translate(t *testing.T, options, daemons string) (*Project, *Report) {
	t.Helper()
	doc := "<boinc><config><master_url>https://p.example.org/p/</master_url>" + options + "</config>"
	if daemons != "" {
		doc += "<daemons>" + daemons + "</daemons>"
	}
	doc += "</boinc>"
	f, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", doc, err)
	}
	p, r, err := Translate(Input{Config: f, OldDir: "/old", ProjectDir: "/new", DBDSN: "dsn"})
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	return p, r
}

// One row per option: the key it sets (if any), and how the report lists
// it when it is not carried over.
func TestTranslateOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, xml string
		key       string
		value     any
		kind      Kind // 0: carried over
	}{
		{"master URL without its slash", "", "url-base", "https://p.example.org/p", 0},
		{"long name", "<long_name>P@H</long_name>", "project-name", "P@H", 0},
		{"relative download dir under the old project", "<download_dir>dl</download_dir>", "download-dir", "/old/dl", 0},
		{"absolute upload dir kept", "<upload_dir>/srv/up/</upload_dir>", "upload-dir", "/srv/up", 0},
		{"key dir names both keys", "<key_dir>/k</key_dir>", "upload-key", "/k/upload_private", 0},
		{"fan-out a power of two", "<uldl_dir_fanout>256</uldl_dir_fanout>", "fanout", 256, 0},
		{"fan-out not a power of two", "<uldl_dir_fanout>1000</uldl_dir_fanout>", "fanout", 1000, OperatorAction},
		{"no fan-out: files flat", "<uldl_dir_fanout>0</uldl_dir_fanout>", "fanout", 1, OperatorAction},
		{"fan-out too large", "<uldl_dir_fanout>131072</uldl_dir_fanout>", "", nil, OperatorAction},
		{"fan-out not a number", "<uldl_dir_fanout>lots</uldl_dir_fanout>", "", nil, OperatorAction},
		{"max wus to send", "<max_wus_to_send>50</max_wus_to_send>", "max-results-per-rpc", 50, 0},
		{"daily quota", "<daily_result_quota>500</daily_result_quota>", "daily-result-quota", 500, 0},
		{"gpu multiplier", "<gpu_multiplier>2</gpu_multiplier>", "gpu-quota-multiplier", 2, 0},
		{"in progress per cpu", "<max_wus_in_progress>3</max_wus_in_progress>", "max-in-progress-per-cpu", 3, 0},
		{"in progress per gpu", "<max_wus_in_progress_gpu>6</max_wus_in_progress_gpu>", "max-in-progress-per-gpu", 6, 0},
		{"sendwork interval above our delay", "<min_sendwork_interval>60</min_sendwork_interval>", "request-delay", "1m1s", 0},
		{"sendwork interval below our delay", "<min_sendwork_interval>2</min_sendwork_interval>", "", nil, 0},
		{"next rpc delay", "<next_rpc_delay>3600</next_rpc_delay>", "next-rpc-delay", "1h0m0s", 0},
		{"grace period above ours", "<report_grace_period>86400</report_grace_period>", "upload-grace", "24h0m0s", 0},
		{"grace period in hours", "<grace_period_hours>3</grace_period_hours>", "upload-grace", "3h0m0s", 0},
		{"grace period within ours", "<report_grace_period>600</report_grace_period>", "", nil, 0},
		{"one result per user on", "<one_result_per_user_per_wu>1</one_result_per_user_per_wu>", "", nil, 0},
		{"one result per user off", "<one_result_per_user_per_wu>0</one_result_per_user_per_wu>", "", nil, Differs},
		{"resend lost results as empty element", "<resend_lost_results/>", "", nil, 0},
		{"resend lost results off", "<resend_lost_results>0</resend_lost_results>", "", nil, Differs},
		{"send result abort off", "<send_result_abort>0</send_result_abort>", "", nil, Differs},
		{"account creation disabled", "<disable_account_creation>1</disable_account_creation>", "", nil, 0},
		{"account creation by RPC disabled", "<disable_account_creation_rpc>1</disable_account_creation_rpc>", "", nil, 0},
		{"account creation allowed", "<disable_account_creation>0</disable_account_creation>", "account-creation", true, 0},
		{"homogeneous redundancy", "<homogeneous_redundancy>2</homogeneous_redundancy>", "", nil, OperatorAction},
		{"no upload certificates", "<dont_generate_upload_certificates>1</dont_generate_upload_certificates>", "", nil, OperatorAction},
		{"upload certificates ignored", "<ignore_upload_certificates/>", "", nil, OperatorAction},
		{"download URL served by ours", "<download_url>https://p.example.org/p/download</download_url>", "", nil, 0},
		{"upload URL elsewhere", "<upload_url>https://p.example.org/p_cgi/file_upload_handler</upload_url>", "", nil, OperatorAction},
		{"replica database", "<replica_db_host>r</replica_db_host>", "", nil, NoEquivalent},
		{"locality scheduling", "<locality_scheduling/>", "", nil, NoEquivalent},
		{"web site option", "<min_passwd_length>8</min_passwd_length>", "", nil, NoEquivalent},
		{"debug flag", "<debug_version_select/>", "", nil, Differs},
		{"debug level", "<sched_debug_level>4</sched_debug_level>", "", nil, Differs},
		{"unknown option", "<my_project_thing>1</my_project_thing>", "", nil, NoEquivalent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, r := translate(t, tc.xml, "")
			if tc.key != "" {
				got, ok := p.Get(tc.key)
				if !ok || !reflect.DeepEqual(got, tc.value) {
					t.Errorf("Translate(%s): %s = %v (set %v), want %v", tc.xml, tc.key, got, ok, tc.value)
				}
			}
			name := optionName(tc.xml)
			found := r.Find(name)
			switch {
			case tc.kind == 0 && len(found) > 0:
				t.Errorf("Translate(%s): %s listed as not carried over: %+v", tc.xml, name, found)
			case tc.kind != 0 && (len(found) != 1 || found[0].Kind != tc.kind):
				t.Errorf("Translate(%s): report for %s = %+v, want one entry of kind %q", tc.xml, name, found, tc.kind)
			}
			if tc.kind == 0 && !mappedHas(r, name) {
				t.Errorf("Translate(%s): %s is neither carried over nor listed", tc.xml, name)
			}
		})
	}
}

// optionName is the first element's name in an XML snippet, master_url
// for none.
func optionName(xml string) string {
	if xml == "" {
		return "master_url"
	}
	end := strings.IndexAny(xml[1:], ">/")
	return xml[1 : 1+end]
}

func mappedHas(r *Report, option string) bool {
	for _, m := range r.Mapped {
		if m.Option == option {
			return true
		}
	}
	return false
}

// One row per daemon command: the daemons list entry it becomes, or how
// the report lists it.
func TestTranslateDaemons(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, daemons string
		want          string // "name program args" of the entry made; "" for none
		kind          Kind
	}{
		{"bitwise validator", "<daemon><cmd>sample_bitwise_validator -d 3 --app a</cmd></daemon>",
			"validator-a validator --app a --checker bitwise", 0},
		{"trivial validator, single dashes", "<daemon><cmd>sample_trivial_validator -app a -sleep_interval 2.5</cmd></daemon>",
			"validator-a validator --app a --checker trust --sleep 2.5s", 0},
		{"script validator with default tokens", `<daemon><cmd>script_validator --app a --init_script "chk" --compare_script 'cmp files files2'</cmd></daemon>`,
			"validator-a validator --app a --checker command --init-cmd /old/bin/chk --compare-cmd /old/bin/cmp", 0},
		{"script validator with tokens ours lack", `<daemon><cmd>script_validator --app a --compare_script "cmp files files2 runtime"</cmd></daemon>`, "", OperatorAction},
		{"validator without app", "<daemon><cmd>sample_bitwise_validator</cmd></daemon>", "", OperatorAction},
		{"project's own validator", "<daemon><cmd>ring_validator --app a</cmd></daemon>", "", OperatorAction},
		{"substring validator", "<daemon><cmd>sample_substr_validator --app a</cmd></daemon>", "", NoEquivalent},
		{"dummy assimilator", "<daemon><cmd>sample_dummy_assimilator --app a</cmd></daemon>", "assimilator-a assimilator --app a --handler copy", 0},
		{"script assimilator with files", `<daemon><cmd>script_assimilator --app a --script "/srv/keep files"</cmd></daemon>`,
			"assimilator-a assimilator --app a --handler command --handler-cmd /srv/keep", 0},
		{"script assimilator with default tokens", `<daemon><cmd>script_assimilator --app a --script keep</cmd></daemon>`, "", OperatorAction},
		{"transitioner replicas", "<daemon><cmd>transitioner --mod 3 0</cmd></daemon><daemon><cmd>transitioner --mod 3 1</cmd></daemon><daemon><cmd>transitioner --mod 3 2</cmd></daemon>",
			"transitioner transitioner", 0},
		{"second transitioner without mod", "<daemon><cmd>transitioner</cmd></daemon><daemon><cmd>transitioner -d 2</cmd></daemon>", "transitioner transitioner", 0},
		{"feeder options join config's", "<daemon><cmd>feeder --allapps --sleep_interval 1</cmd></daemon>", "feeder feeder --sleep 1s", 0},
		{"feeder random order", "<daemon><cmd>feeder --random_order</cmd></daemon>", "feeder feeder", 0},
		{"file deleter per app", "<daemon><cmd>file_deleter --app a --preserve_wu_files</cmd></daemon>", "file_deleter file_deleter", 0},
		{"db_purge", "<daemon><cmd>db_purge --min_age_days 0.5 --max_wu_per_file 100 --zip</cmd></daemon>", "db_purge db_purge --min-age 12h --max-archive-rows 100", 0},
		{"trickle deadline", "<daemon><cmd>trickle_deadline --variety v --extension_period 3600 --extension_timeframe 10</cmd></daemon>",
			"trickle_handler-v trickle_handler --variety v --extend-deadline 1h0m0s", 0},
		{"trickle credit", "<daemon><cmd>trickle_credit --variety v --max_runtime 3600</cmd></daemon>", "", OperatorAction},
		{"work generator of the project", "<daemon><cmd>run_in_ops my_work_generator --app a</cmd></daemon>", "", OperatorAction},
		{"example work generator", "<daemon><cmd>sample_work_generator --app a</cmd></daemon>", "", NoEquivalent},
		{"disabled", "<daemon><cmd>sample_bitwise_validator --app a</cmd><disabled>1</disabled></daemon>", "", Disabled},
		{"not disabled", "<daemon><cmd>sample_bitwise_validator --app a</cmd><disabled>0</disabled></daemon>", "validator-a validator --app a --checker bitwise", 0},
		{"on another host", "<daemon><cmd>transitioner</cmd><host>other</host></daemon>", "", OperatorAction},
		{"unbalanced quote", `<daemon><cmd>script_validator --app a --init_script "chk</cmd></daemon>`, "", OperatorAction},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, r := translate(t, "<host>main</host>", tc.daemons)
			var got []string
			for _, d := range p.Daemons {
				if d.Spec.Program == "scheduler" || (d.Spec.Program == "feeder" && !strings.Contains(tc.daemons, "feeder")) {
					continue
				}
				name := d.Spec.Name
				if name == "" {
					name = d.Spec.Program
				}
				got = append(got, strings.TrimSpace(name+" "+d.Spec.Program+" "+strings.Join(d.Spec.Args, " ")))
			}
			want := []string{}
			if tc.want != "" {
				want = []string{tc.want}
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("daemons from %s = %q, want %q", tc.daemons, got, want)
			}
			var kinds []Kind
			for _, u := range r.Unmapped {
				if strings.HasPrefix(u.Option, "daemon ") && !strings.Contains(u.Option, ": ") {
					kinds = append(kinds, u.Kind)
				}
			}
			switch {
			case tc.kind == 0 && tc.want != "" && !strings.Contains(tc.name, "second") && len(kinds) > 0:
				t.Errorf("daemon %s listed as not carried over: %v", tc.daemons, kinds)
			case tc.kind != 0 && (len(kinds) != 1 || kinds[0] != tc.kind):
				t.Errorf("report kinds for %s = %v, want [%v]", tc.daemons, kinds, tc.kind)
			}
		})
	}
}

// A transitioner run as --mod 3 replicas becomes one entry with three
// replicas; a second one without --mod is listed, not added.
func TestTranslateDaemonReplicas(t *testing.T) {
	t.Parallel()
	p, _ := translate(t, "", "<daemon><cmd>transitioner --mod 3 0</cmd></daemon><daemon><cmd>transitioner --mod 3 2</cmd></daemon>")
	for _, d := range p.Daemons {
		if d.Spec.Program == "transitioner" && (d.Spec.Replicas != 3 || len(d.From) != 2) {
			t.Errorf("transitioner entry = %+v, want 3 replicas from 2 commands", d)
		}
	}
	_, r := translate(t, "", "<daemon><cmd>transitioner</cmd></daemon><daemon><cmd>transitioner -d 2</cmd></daemon>")
	if u := r.Find("daemon transitioner -d 2"); len(u) != 1 || u[0].Kind != NoEquivalent {
		t.Errorf("second transitioner = %+v, want it listed as needing no second entry", u)
	}
}

// boincDir is BOINC's filename_hash: the MD5's hex digits 1..7 as a
// number, modulo the fan-out, in hex.
func boincDir(name string, fan int) string {
	sum := md5.Sum([]byte(name))
	x, _ := strconv.ParseUint(hex.EncodeToString(sum[:])[1:8], 16, 32)
	return fmt.Sprintf("%x", x%uint64(fan))
}

// The claim the fan-out mapping rests on: our hashed directory is BOINC's
// for every power-of-two fan-out, and not for others.
func TestFanoutMatchesBOINCForPowersOfTwo(t *testing.T) {
	t.Parallel()
	for _, fan := range []int{2, 16, 256, 1024, 4096, 65536} {
		for i := range 2000 {
			name := fmt.Sprintf("ring_%d_%d_0", i, i*7919)
			if got, want := fanout.Dir(name, fan), boincDir(name, fan); got != want {
				t.Fatalf("fan-out %d, %s: ours %s, BOINC's %s", fan, name, got, want)
			}
		}
	}
	differ := 0
	for i := range 2000 {
		name := fmt.Sprintf("ring_%d", i)
		if fanout.Dir(name, 1000) != boincDir(name, 1000) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("fan-out 1000: ours and BOINC's agree on every name; the mapping would not need to flag it")
	}
}

func TestSplitCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []string
	}{
		{"feeder -d 3", []string{"feeder", "-d", "3"}},
		{"  a\t b\n c ", []string{"a", "b", "c"}},
		{`v --s "x files files2" --t 'y z'`, []string{"v", "--s", "x files files2", "--t", "y z"}},
		{`a "b \"c\"" d\ e`, []string{"a", `b "c"`, "d e"}},
		{`a "" b`, []string{"a", "", "b"}},
	}
	for _, tc := range cases {
		got, err := splitCommand(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`a "b`, `a 'b`} {
		if _, err := splitCommand(bad); err == nil {
			t.Errorf("splitCommand(%q): no error for an unbalanced quote", bad)
		}
	}
}

// The old database's DSN keeps a password with DSN punctuation intact.
func TestSourceDSN(t *testing.T) {
	t.Parallel()
	f, err := ParseConfig([]byte("<boinc><config><db_name>p</db_name><db_host>h:3307</db_host><db_user>u</db_user><db_passwd>a:b@c/d</db_passwd></config></boinc>"))
	if err != nil {
		t.Fatal(err)
	}
	dsn, err := SourceDSN(f)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("ParseDSN(%q): %v", dsn, err)
	}
	if c.User != "u" || c.Passwd != "a:b@c/d" || c.Addr != "h:3307" || c.DBName != "p" {
		t.Errorf("SourceDSN round trip = %+v", c)
	}
	if _, err := SourceDSN(&File{}); err == nil {
		t.Error("SourceDSN without db_name: no error")
	}
}
