package boincconfig

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
)

// Input is what Translate converts: the parsed files and where the new
// project lives.
type Input struct {
	// Config is the old project's config.xml.
	Config *File
	// Aux is its config_aux.xml (nil when it has none).
	Aux *Aux
	// OldDir is the old project directory (absolute); relative paths in
	// config.xml are under it.
	OldDir string
	// ProjectDir is the new project directory, written as project-dir.
	ProjectDir string
	// DBDSN is the database the import fills, written as db-dsn. Empty:
	// db-dsn is the old database's, and the report asks the operator to
	// change it.
	DBDSN string
	// PlanClasses is the old project's plan_class_spec.xml, parsed (nil:
	// it has none). Convert copies it to PlanClassFile in ProjectDir.
	PlanClasses *planclass.Specs
	// CodeSignPrivate is the path of a code-signing private key found in
	// the old key directory, "" when there is none.
	CodeSignPrivate string
}

// PlanClassFile is the name of the copied plan classes in the new
// project directory, the plan-class-spec key's value.
const PlanClassFile = "plan_class_spec.xml"

// Project is the project file to write: settings in order, then the
// supervisor's daemons.
type Project struct {
	Settings []Setting
	Daemons  []Daemon
}

// Setting is one key of the project file.
type Setting struct {
	Key   string
	Value any    // string, int or bool
	From  string // the BOINC option it came from, for the file's comment
}

// Daemon is one entry of the daemons list, with the old command it
// replaces.
type Daemon struct {
	Spec config.DaemonSpec
	From []string
}

// Get returns a setting's value.
func (p *Project) Get(key string) (any, bool) {
	for _, s := range p.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return nil, false
}

func (p *Project) set(key string, v any, from string) {
	for i := range p.Settings {
		if p.Settings[i].Key == key {
			p.Settings[i] = Setting{Key: key, Value: v, From: from}
			return
		}
	}
	p.Settings = append(p.Settings, Setting{Key: key, Value: v, From: from})
}

// translator carries one conversion.
type translator struct {
	in      Input
	proj    Project
	rep     Report
	urlBase string
	// daemons converted so far, by name, and the ports handed out.
	byName map[string]int // index in proj.Daemons
	ports  map[int]bool
	// feederArgs are the feeder's flags from <config> options.
	feederArgs []string
	// debugLevels are the daemons' -d values, reported once.
	debugLevels []string
}

// Translate converts a parsed BOINC configuration into a project file and
// the report of what it did. It reads no files.
func Translate(in Input) (*Project, *Report, error) {
	if in.Config == nil {
		return nil, nil, fmt.Errorf("translate: no config.xml")
	}
	t := &translator{in: in, byName: map[string]int{}, ports: map[int]bool{}}
	t.proj.set(config.FlagProjectDir, in.ProjectDir, "")
	t.database()
	if v, ok := in.Config.Lookup("master_url"); ok {
		t.urlBase = strings.TrimRight(v, "/")
	}
	for _, o := range in.Config.Options {
		t.option(o)
	}
	t.accountCreation()
	if in.PlanClasses != nil {
		t.planClasses()
	}
	if in.Aux != nil {
		t.aux(in.Aux)
	}
	t.daemons()
	for _, e := range in.Config.Tasks {
		t.task(e)
	}
	return &t.proj, &t.rep, nil
}

// SourceDSN is the old project's database as config.xml names it, in the
// form --db-dsn and the import's --from take.
func SourceDSN(f *File) (string, error) {
	name, _ := f.Lookup("db_name")
	if name == "" {
		return "", fmt.Errorf("config.xml: no <db_name>")
	}
	host, _ := f.Lookup("db_host")
	if host == "" {
		host = "localhost"
	}
	user, _ := f.Lookup("db_user")
	pass, _ := f.Lookup("db_passwd")
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, pass, "tcp", host, name
	if !strings.Contains(host, ":") {
		c.Addr = host + ":3306"
	}
	return c.FormatDSN(), nil
}

// database maps db_name, db_host, db_user and db_passwd.
func (t *translator) database() {
	src, err := SourceDSN(t.in.Config)
	opts := []string{"db_name", "db_host", "db_user", "db_passwd"}
	switch {
	case t.in.DBDSN != "":
		t.proj.set(config.FlagDBDSN, t.in.DBDSN, "the database the import fills")
		for _, o := range opts {
			if v, ok := t.in.Config.Lookup(o); ok {
				t.rep.mapped(o, shown(o, v), "the old database, which the import reads (its --from) and leaves as it is; db-dsn is the new one")
			}
		}
	case err != nil:
		t.rep.unmapped("db_name", "", OperatorAction, "config.xml names no database: set db-dsn to the database the import fills")
	default:
		t.proj.set(config.FlagDBDSN, src, "db_host, db_user, db_passwd, db_name")
		for _, o := range opts {
			if v, ok := t.in.Config.Lookup(o); ok {
				t.rep.mapped(o, shown(o, v), "", config.FlagDBDSN)
			}
		}
		t.rep.unmapped("db_name", "", OperatorAction,
			"db-dsn is the OLD project's database, whose schema is BOINC's: set it to the database `taskctl import boinc` fills (our programs refuse BOINC's schema)")
	}
}

// shown hides a password in the report.
func shown(option, v string) string {
	if option == "db_passwd" || option == "replica_db_passwd" {
		return "(hidden)"
	}
	return v
}

// option maps one <config> element.
func (t *translator) option(o Option) {
	name, v := o.Name, o.Value
	if h, ok := optionHandlers[name]; ok {
		if h != nil { // nil: read with others (database, account creation)
			h(t, name, v)
		}
		return
	}
	if reason, ok := noEquivalent[name]; ok {
		t.rep.unmapped(name, v, NoEquivalent, reason)
		return
	}
	if reason, ok := differs[name]; ok {
		t.rep.unmapped(name, v, Differs, reason)
		return
	}
	if webOptions[name] {
		t.rep.unmapped(name, v, NoEquivalent, "a web site setting (BOINC's PHP pages read it); the task server has no web site")
		return
	}
	if strings.HasPrefix(name, "debug_") {
		t.rep.unmapped(name, v, Differs, "scheduler debug logging: our programs log per item at --log-level debug")
		return
	}
	t.rep.unmapped(name, v, NoEquivalent, "not an option BOINC's scheduler or daemons read (the web site's, or a program of the project's own?)")
}

type optionHandler func(t *translator, name, v string)

// optionHandlers maps the options that set keys, or whose value decides
// whether our behaviour is the old one.
var optionHandlers = map[string]optionHandler{
	// Handled with the database, the account creation or the daemons.
	"db_name": nil, "db_host": nil, "db_user": nil, "db_passwd": nil,
	"disable_account_creation": nil, "disable_account_creation_rpc": nil,

	"master_url": func(t *translator, name, v string) {
		t.proj.set("url-base", t.urlBase, name)
		note := "clients know the project by this URL: serve it from our scheduler, whose master page names its scheduler URL (url-base/scheduler)"
		if u := t.urlBase; !strings.Contains(hostOf(u), ".") {
			t.rep.unmapped(name, v, OperatorAction, "its host has no dot, and the BOINC client refuses such a scheduler URL: use the project's public name")
		}
		t.rep.mapped(name, v, note, "url-base")
	},
	"long_name": func(t *translator, name, v string) {
		t.proj.set("project-name", v, name)
		t.rep.mapped(name, v, "", "project-name")
	},
	"project_dir": func(t *translator, name, v string) {
		t.rep.mapped(name, v, "the old directory: relative paths in config.xml are read under it; project-dir is the new project's ("+t.in.ProjectDir+")")
	},
	"host": func(t *translator, name, v string) {
		t.rep.mapped(name, v, "the old main host: daemons with another <host> are listed below")
	},
	"download_dir": func(t *translator, name, v string) {
		p := t.path(v)
		t.proj.set(config.FlagDownloadDir, p, name)
		t.rep.mapped(name, v, "kept where it is: the app versions and the inputs of jobs in flight are there; the user our daemons run as must be able to read and write it", config.FlagDownloadDir)
	},
	"upload_dir": func(t *translator, name, v string) {
		p := t.path(v)
		t.proj.set(config.FlagUploadDir, p, name)
		t.rep.mapped(name, v, "kept where it is: outputs of jobs in flight are there; the user our daemons run as must be able to read and write it", config.FlagUploadDir)
	},
	"download_url": func(t *translator, name, v string) { t.servedURL(name, v, "/download", "downloads") },
	"upload_url":   func(t *translator, name, v string) { t.servedURL(name, v, "/file_upload_handler", "uploads") },
	"key_dir": func(t *translator, name, v string) {
		dir := t.path(v)
		t.proj.set("upload-key", filepath.Join(dir, "upload_private"), name)
		t.proj.set("code-sign-key", filepath.Join(dir, "code_sign_public"), name)
		t.rep.mapped(name, v, "the old keys, as they are: upload certificates of tasks in flight were signed with upload_private, and clients hold the code-signing key app versions are signed with", "upload-key", "code-sign-key")
		if t.in.CodeSignPrivate != "" {
			t.rep.unmapped(name, t.in.CodeSignPrivate, OperatorAction,
				"a code-signing PRIVATE key is on the server: whoever holds it can ship a program to every volunteer; move it to an offline machine and sign there (taskctl sign)")
		}
	},
	"uldl_dir_fanout": func(t *translator, name, v string) {
		n, ok := t.intOption(name, v)
		if !ok {
			return
		}
		t.fanout(name, v, n)
	},
	"max_wus_to_send": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.proj.set("max-results-per-rpc", n, name)
			t.rep.mapped(name, v, "BOINC multiplies it by the host's CPUs (and GPUs); ours is the most new tasks in one reply whatever the host", "max-results-per-rpc")
		}
	},
	"daily_result_quota": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n >= 0 {
			t.proj.set("daily-result-quota", n, name)
			t.rep.mapped(name, v, "read by the scheduler and the validators alike; a host's quota doubles back only on validated results", "daily-result-quota")
		}
	},
	"gpu_multiplier": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.proj.set("gpu-quota-multiplier", n, name)
			t.rep.mapped(name, v, "multiplies the daily quota of a GPU version per GPU; it does not raise max-results-per-rpc", "gpu-quota-multiplier")
		}
	},
	"max_wus_in_progress": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.proj.set("max-in-progress-per-cpu", n, name)
			t.rep.mapped(name, v, "", "max-in-progress-per-cpu")
		}
	},
	"max_wus_in_progress_gpu": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.proj.set("max-in-progress-per-gpu", n, name)
			t.rep.mapped(name, v, "", "max-in-progress-per-gpu")
		}
	},
	"min_sendwork_interval": func(t *translator, name, v string) {
		n, ok := t.floatOption(name, v)
		if !ok || n <= 0 {
			if ok {
				t.rep.mapped(name, v, "")
			}
			return
		}
		// BOINC asks for max(1.01 n, n+1) seconds in every reply.
		d := time.Duration(math.Ceil(max(1.01*n, n+1))) * time.Second
		if d <= defaultRequestDelay {
			t.rep.mapped(name, v, "our replies already ask clients to wait "+defaultRequestDelay.String())
			return
		}
		t.proj.set("request-delay", d.String(), name)
		t.rep.mapped(name, v, "every reply asks the client to wait this long, as BOINC's did; ours does not refuse work to a client that comes back sooner", "request-delay")
	},
	"next_rpc_delay": func(t *translator, name, v string) {
		if n, ok := t.floatOption(name, v); ok && n > 0 {
			d := time.Duration(n * float64(time.Second)).Round(time.Second)
			t.proj.set("next-rpc-delay", d.String(), name)
			t.rep.mapped(name, v, "", "next-rpc-delay")
		}
	},
	"report_grace_period": func(t *translator, name, v string) {
		if n, ok := t.floatOption(name, v); ok {
			t.grace(name, v, time.Duration(n)*time.Second)
		}
	},
	"grace_period_hours": func(t *translator, name, v string) {
		if n, ok := t.floatOption(name, v); ok {
			t.grace(name, v, time.Duration(n*3600)*time.Second)
		}
	},
	"shmem_work_items": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.feederArgs = append(t.feederArgs, "--slots", strconv.Itoa(n))
			t.rep.mapped(name, v, "", "daemons: feeder --slots")
		}
	},
	"feeder_query_size": func(t *translator, name, v string) {
		if n, ok := t.intOption(name, v); ok && n > 0 {
			t.feederArgs = append(t.feederArgs, "--batch", strconv.Itoa(n))
			t.rep.mapped(name, v, "", "daemons: feeder --batch")
		}
	},
	"one_result_per_user_per_wu": func(t *translator, name, v string) {
		t.alwaysOn(name, v, "a job never goes to two hosts of one user, always (one_result_per_host_per_wu follows)")
	},
	"one_result_per_host_per_wu": func(t *translator, name, v string) {
		t.alwaysOn(name, v, "a job never goes to two hosts of one user, so never twice to one host")
	},
	"resend_lost_results": func(t *translator, name, v string) {
		t.alwaysOn(name, v, "tasks a host should have but does not list are always resent (or abandoned past their deadline)")
	},
	"send_result_abort": func(t *translator, name, v string) {
		t.alwaysOn(name, v, "a host is always told to abort tasks that are unknown, not its own or no longer needed")
	},
	"homogeneous_redundancy": func(t *translator, name, v string) {
		n, ok := t.intOption(name, v)
		switch {
		case !ok:
		case n == 0:
			t.rep.mapped(name, v, "off, as here by default")
		default:
			t.rep.unmapped(name, v, OperatorAction, fmt.Sprintf("set per app here: taskctl app set --app APP --homogeneous-redundancy %d, for each app without its own", n))
		}
	},
	"ignore_upload_certificates": func(t *translator, name, v string) {
		if !boolValue(v) {
			t.rep.mapped(name, v, "our data server always checks upload certificates")
			return
		}
		t.rep.unmapped(name, v, OperatorAction, "our data server accepts only uploads with a valid certificate; see dont_generate_upload_certificates")
	},
	"dont_generate_upload_certificates": func(t *translator, name, v string) {
		if !boolValue(v) {
			t.rep.mapped(name, v, "our scheduler signs a certificate into every task, with upload-key (the old key) or the Ed25519 key")
			return
		}
		t.rep.unmapped(name, v, OperatorAction, "tasks the old server sent carry no upload certificate, and our data server refuses uploads without one: "+
			"let the tasks in flight drain on the old server before switching (or accept that their outputs are lost and their jobs resent)")
	},
}

// defaultRequestDelay is the scheduler's --request-delay default.
const defaultRequestDelay = 5 * time.Second

// defaultUploadGrace is the scheduler's and file_deleter's --upload-grace
// default.
const defaultUploadGrace = time.Hour

// noEquivalent are options with no setting here, and why.
var noEquivalent = map[string]string{
	"replica_db_name":                        "our programs read and write one database (several --db-dsn addresses are a Galera cluster's nodes, not read replicas)",
	"replica_db_host":                        "our programs read and write one database (several --db-dsn addresses are a Galera cluster's nodes, not read replicas)",
	"replica_db_user":                        "our programs read and write one database",
	"replica_db_passwd":                      "our programs read and write one database",
	"shmem_key":                              "the feeder's cache is a file (shm-path, by default named after the project directory)",
	"httpd_user":                             "our scheduler is its own HTTP server",
	"app_dir":                                "taskctl app-version add copies app files into the download directory",
	"log_dir":                                "the supervisor writes each daemon's log to <project-dir>/log",
	"cache_md5_info":                         "file checksums are recorded when files are staged",
	"fuh_set_initial_permission":             "an output's file mode is its state here (0644 uploading, 0444 finished, 0400 closed)",
	"fuh_set_completed_permission":           "an output's file mode is its state here (0644 uploading, 0444 finished, 0400 closed)",
	"hr_class_static":                        "homogeneous-redundancy classes are per app (taskctl app set --homogeneous-redundancy)",
	"hr_allocate_slots":                      "the feeder caches jobs of every class alike",
	"msg_to_host":                            "no messages to hosts from the database (trickle-down messages: taskctl trickle send)",
	"reliable_priority_on_over":              "reliability here is adaptive replication (--ar-trust-valid) and tail copies to fast, reliable hosts",
	"reliable_priority_on_over_except_error": "reliability here is adaptive replication (--ar-trust-valid) and tail copies to fast, reliable hosts",
	"reliable_on_priority":                   "reliability here is adaptive replication (--ar-trust-valid) and tail copies to fast, reliable hosts",
	"reliable_max_avg_turnaround":            "reliability here is adaptive replication (--ar-trust-valid) and tail copies to fast, reliable hosts",
	"reliable_max_error_rate":                "reliability here is adaptive replication (--ar-trust-valid) and tail copies to fast, reliable hosts",
	"reliable_reduced_delay_bound":           "deadlines are the job's delay_bound for every host",
	"delete_delay_hours":                     "files are deleted once their job is assimilated and every instance is over",
	"distinct_beta_apps":                     "beta apps and versions go to volunteers who allow beta work, for every app",
	"ended":                                  "no project-ended notice: stop the scheduler, or tell volunteers on the web site",
	"enable_vda":                             "no volunteer data archival",
	"vda_host_timeout":                       "no volunteer data archival",
	"enable_assignment":                      "no assigned jobs",
	"enable_assignment_multi":                "no assigned jobs",
	"job_size_matching":                      "no job size classes",
	"size_classes":                           "no job size classes",
	"dont_send_jobs":                         "no switch to stop sending jobs: stop the work generators, or the scheduler",
	"ban_cpu":                                "no CPU bans: use a plan class",
	"ban_os":                                 "no OS bans: use a plan class",
	"no_amd_k6":                              "no CPU bans: use a plan class",
	"dont_search_host_for_user":              "hosts are matched as the client identifies them",
	"default_disk_min_free_gb":               "the host's own disk figures are used",
	"dont_store_success_stderr":              "stderr is kept, its last 65,535 bytes",
	"file_deletion_strategy":                 "no deletion of files on hosts; sticky files stay until their job's files go",
	"ignore_delay_bound":                     "deadline feasibility is always checked",
	"locality_scheduling":                    "no locality scheduling",
	"locality_scheduler_fraction":            "no locality scheduling",
	"locality_scheduling_sorted_order":       "no locality scheduling",
	"locality_scheduling_wait_period":        "no locality scheduling",
	"locality_scheduling_send_timeout":       "no locality scheduling",
	"locality_scheduling_workunit_file":      "no locality scheduling",
	"locality_scheduling_sticky_file":        "no locality scheduling",
	"sched_old":                              "one scheduling policy: per-resource requests and deadline feasibility",
	"max_ncpus":                              "the host's CPUs as reported, lowered by the volunteer's <max_cpus>",
	"max_download_urls_per_file":             "one download URL per file",
	"replace_download_url_by_timezone":       "one download URL per file",
	"min_core_client_version":                "no client version floor (a plan class can require one)",
	"min_core_client_version_announced":      "no client version floor",
	"min_core_client_upgrade_deadline":       "no client version floor",
	"nowork_skip":                            "every request is handled",
	"report_max":                             "no limit on how many tasks a client holds before reporting",
	"request_time_stats_log":                 "the host's on-fraction is recorded; no log of it",
	"scheduler_log_buffer":                   "logs go to the daemon's log file as they happen",
	"sched_lockfile_dir":                     "no scheduler lock files: claims are conditional updates",
	"symstore":                               "no symbol store",
	"user_filter":                            "no assigned jobs",
	"workload_sim":                           "deadline feasibility uses the host's predicted queue end",
	"prefer_primary_platform":                "the fastest version the host can run is chosen, measured per host",
	"version_select_random_factor":           "one time in ten an unmeasured version is tried instead",
	"maintenance_delay":                      "no maintenance mode: stop the daemons; clients back off",
	"keyword_sched":                          "no keyword scheduling",
	"rte_no_stats":                           "runtime estimates come from the host's median",
	"estimate_flops_from_hav_pfc":            "runtime estimates come from the host's median",
	"batch_accel":                            "tail acceleration is the transitioner's (--tail-fraction, --tail-after), always on",
	"credit_by_app":                          "no per-app credit",
	"non_cpu_intensive":                      "no non-CPU-intensive projects",
	"verify_files_on_app_start":              "not sent",
	"strict_memory_bound":                    "the job's memory bound is checked against the host's memory",
	"debug_req_reply_dir":                    "requests and replies are not kept",
}

// differs are options for behaviour we have, but our way.
var differs = map[string]string{
	"sched_debug_level":    "log verbosity: our programs log at --log-level (info; debug logs each item)",
	"fuh_debug_level":      "log verbosity: our programs log at --log-level (info; debug logs each item)",
	"max_results_accepted": "a request's first 2,000 reports (and 8 MiB of report text) are read; the client reports the rest next time",
}

// webOptions are config.xml options BOINC's web pages read.
var webOptions = map[string]bool{}

func init() {
	for _, o := range []string{"account_creation_rpc_require_consent", "account_manager", "akismet_key",
		"default_disk_max_used_gb", "default_disk_max_used_pct", "disable_team_creation", "dont_suppress_pending",
		"enable_delete_account", "enable_login_mustagree_termsofuse", "enable_privacy_by_default", "hosts_per_page",
		"min_passwd_length", "moderators_allowed_to_ban", "moderators_vote_to_ban", "no_forum_rating",
		"no_web_account_creation", "disable_web_account_creation", "profile_min_credit", "profile_screening",
		"project_id", "recaptcha_private_key", "recaptcha_public_key", "remote_submission_log", "remote_submit_log",
		"remote_submit_request_log", "replica", "rpc_key", "sandbox_dir", "scheduler_disk_space_check_hardcoded",
		"show_results", "stripchart_cgi_url", "team_forums_members_only", "teams_per_page", "users_per_page",
		"user_url", "user_country", "no_computing", "forum_post_min_credit"} {
		webOptions[o] = true
	}
}

// path resolves a config.xml path against the old project directory.
func (t *translator) path(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(t.in.OldDir, p)
}

func (t *translator) intOption(name, v string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		t.rep.unmapped(name, v, OperatorAction, "not a whole number; left out")
		return 0, false
	}
	return n, true
}

func (t *translator) floatOption(name, v string) (float64, bool) {
	n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		t.rep.unmapped(name, v, OperatorAction, "not a number; left out")
		return 0, false
	}
	return n, true
}

// alwaysOn maps an option for behaviour this server always has.
func (t *translator) alwaysOn(name, v, what string) {
	if boolValue(v) {
		t.rep.mapped(name, v, what)
		return
	}
	t.rep.unmapped(name, v, Differs, "off in the old project, always on here: "+what)
}

// servedURL checks a download or upload URL against the URL our
// scheduler serves it at: tasks in flight name the old one.
func (t *translator) servedURL(name, v, path, what string) {
	ours := t.urlBase + path
	if strings.TrimRight(v, "/") == ours {
		t.rep.mapped(name, v, "our scheduler serves "+what+" there (url-base"+path+")")
		return
	}
	t.rep.unmapped(name, v, OperatorAction, fmt.Sprintf(
		"tasks in flight use %s for %s, and new ones %s: route the old URL to our scheduler's %s (a reverse-proxy rule), or keep the master URL's %s",
		v, what, ours, path, path))
}

// fanout maps uldl_dir_fanout, after checking our hashed directories are
// BOINC's for it: ours take the name's MD5's first 32 bits modulo the
// fan-out, BOINC's the 28 bits after the first hex digit, so the two agree
// exactly when the fan-out is a power of two (at most 2^28).
func (t *translator) fanout(name, v string, n int) {
	switch {
	case n == 0:
		t.proj.set(config.FlagFanout, 1, name)
		t.rep.unmapped(name, v, OperatorAction, "the old project keeps files flat in the download and upload directories; ours in sub-directories: "+
			"move every file into the sub-directory 0 (fanout: 1), and route the old download URLs of tasks in flight")
	case n < 0 || config.CheckFanout(n) != nil:
		t.rep.unmapped(name, v, OperatorAction, "outside 1..65536, the fan-outs our programs take: re-stage the files under a fan-out they take")
	case n&(n-1) != 0:
		t.proj.set(config.FlagFanout, n, name)
		t.rep.unmapped(name, v, OperatorAction, "not a power of two, so our hashed sub-directories are not BOINC's for it: "+
			"the files already there would not be found; move each into fanout.Dir(name, fanout) before starting")
	default:
		t.proj.set(config.FlagFanout, n, name)
		t.rep.mapped(name, v, "a power of two: our hashed sub-directories are BOINC's, so every file stays where it is", config.FlagFanout)
	}
}

// grace maps the report grace period to the upload certificates' grace.
func (t *translator) grace(name, v string, d time.Duration) {
	note := "no grace before time-out here: an instance times out at the deadline its client was given, and a report after it is still recorded and credited while its job is not finished"
	if d <= defaultUploadGrace {
		t.rep.mapped(name, v, note+"; uploads are accepted "+defaultUploadGrace.String()+" past the deadline")
		return
	}
	t.proj.set("upload-grace", d.String(), name)
	t.rep.mapped(name, v, note+"; upload certificates last this long past the deadline", "upload-grace")
}

// accountCreation maps disable_account_creation(_rpc): BOINC lets the
// client create accounts unless either is set; ours only with
// --account-creation.
func (t *translator) accountCreation() {
	f := t.in.Config
	d1, ok1 := f.Lookup("disable_account_creation")
	d2, ok2 := f.Lookup("disable_account_creation_rpc")
	if (ok1 && boolValue(d1)) || (ok2 && boolValue(d2)) {
		for _, o := range []Option{{"disable_account_creation", d1}, {"disable_account_creation_rpc", d2}} {
			if _, ok := f.Lookup(o.Name); ok {
				t.rep.mapped(o.Name, o.Value, "clients cannot create accounts, as by default here")
			}
		}
		return
	}
	t.proj.set("account-creation", true, "disable_account_creation, disable_account_creation_rpc")
	for _, o := range []Option{{"disable_account_creation", d1}, {"disable_account_creation_rpc", d2}} {
		if _, ok := f.Lookup(o.Name); ok {
			t.rep.mapped(o.Name, o.Value, "the old project let the BOINC Manager create accounts (disable_account_creation and _rpc unset or 0)", "account-creation")
		}
	}
	if !ok1 && !ok2 {
		t.rep.mapped("disable_account_creation", "", "unset: the old project let the BOINC Manager create accounts", "account-creation")
	}
}

// planClasses points plan-class-spec at the copied file and lists the
// classes this server accepts but never sends.
func (t *translator) planClasses() {
	t.proj.set(config.FlagPlanClassSpec, PlanClassFile, "plan_class_spec.xml")
	names := t.in.PlanClasses.Names()
	t.rep.mapped("plan_class_spec.xml", fmt.Sprintf("%d classes", len(names)), "copied into the new project directory after it parsed", config.FlagPlanClassSpec)
	for _, n := range names {
		if err := t.in.PlanClasses.Supported(n); err != nil {
			t.rep.unmapped("plan_class_spec.xml: "+n, "", OperatorAction, "accepted, but this server never sends its versions: "+err.Error())
		}
	}
}

// hostOf returns a URL's host, "" when it has none.
func hostOf(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		u = u[:i]
	}
	if i := strings.LastIndex(u, ":"); i >= 0 && !strings.Contains(u[i:], "]") {
		u = u[:i]
	}
	return u
}
