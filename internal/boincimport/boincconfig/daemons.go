package boincconfig

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/config"
)

// Our programs, in the order the supervisor starts them (producers before
// consumers), with the first port of their /metrics listeners as in
// deploy/project.yaml.example.
var programs = []struct {
	name string
	port int
}{
	{"feeder", 9103}, {"scheduler", 9101}, {"work_generator", 9180}, {"transitioner", 9120},
	{"validator", 9140}, {"assimilator", 9150}, {"file_deleter", 9160}, {"db_purge", 9170},
	{"trickle_handler", 9190},
}

// arity is how many values each BOINC daemon option takes; options not
// listed take none.
var arity = map[string]int{
	"d": 1, "debug_level": 1, "mod": 2, "wmod": 2, "sleep_interval": 1, "app": 1, "appid": 1, "appids": 1,
	"purge_stale": 1, "wu_id": 1, "one_pass_N_WU": 1, "min_wu_id": 1, "max_wu_id": 1, "max_granted_credit": 1,
	"credit_from_runtime": 1, "init_script": 1, "compare_script": 1, "script": 1, "download_dir": 1,
	"xml_doc_like": 1, "min_age_days": 1, "max": 1, "max_wu_per_file": 1, "batch": 1, "variety": 1,
	"extension_period": 1, "extension_timeframe": 1, "max_runtime": 1,
}

// arg is one option of a daemon's command line.
type arg struct {
	name   string // without leading dashes
	values []string
}

// parseArgs splits a BOINC daemon's arguments into options. BOINC takes
// -x and --x alike; a word that is not an option is a value of the one
// before it.
func parseArgs(words []string) []arg {
	var out []arg
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || len(w) == 1 {
			if len(out) > 0 {
				out[len(out)-1].values = append(out[len(out)-1].values, w)
			} else {
				out = append(out, arg{name: w})
			}
			continue
		}
		a := arg{name: strings.TrimLeft(w, "-")}
		for n := arity[a.name]; n > 0 && i+1 < len(words); n-- {
			i++
			a.values = append(a.values, words[i])
		}
		out = append(out, a)
	}
	return out
}

func (a arg) String() string {
	return strings.TrimSpace("--" + a.name + " " + strings.Join(a.values, " "))
}

// daemonConv is the conversion of one <daemon>.
type daemonConv struct {
	t       *translator
	label   string // "daemon <cmd>" in the report
	boinc   string // BOINC program name
	program string // ours
	app     string
	mod     int
	index   int
	args    []string
	notes   []string
	// failed is set when the daemon cannot be carried over (reported).
	failed bool
}

func (c *daemonConv) drop(kind Kind, reason string) {
	c.t.rep.unmapped(c.label, "", kind, reason)
	c.failed = true
}

func (c *daemonConv) unmappedArg(a arg, kind Kind, reason string) {
	c.t.rep.unmapped(c.label+": "+a.String(), "", kind, reason)
}

// daemons converts the <daemons> list, adds the feeder and the scheduler
// every project here runs, and hands out /metrics ports.
func (t *translator) daemons() {
	t.addDaemon(&daemonConv{t: t, program: "feeder", args: t.feederArgs}, "")
	t.addDaemon(&daemonConv{t: t, program: "scheduler"}, "")
	t.rep.mapped("daemons: scheduler", "", "BOINC's scheduler and file upload handler ran as CGI programs under the web server; ours is a daemon on --addr "+
		"(127.0.0.1:8080): route the master URL, the scheduler URL and the download and upload URLs to it (its master page names url-base/scheduler)",
		"daemons: scheduler")
	for _, e := range t.in.Config.Daemons {
		t.daemon(e)
	}
	if len(t.debugLevels) > 0 {
		t.rep.unmapped("daemons: -d (log verbosity)", strings.Join(t.debugLevels, ", "), Differs,
			"ours log at --log-level (info); add --log-level debug to a daemon's args: to log each item")
	}
	rank := map[string]int{}
	for i, p := range programs {
		rank[p.name] = i
	}
	sort.SliceStable(t.proj.Daemons, func(i, j int) bool {
		return rank[t.proj.Daemons[i].Spec.Program] < rank[t.proj.Daemons[j].Spec.Program]
	})
	for i := range t.proj.Daemons {
		d := &t.proj.Daemons[i]
		d.Spec.Listen = "127.0.0.1:" + strconv.Itoa(t.port(d.Spec.Program, max(d.Spec.Replicas, 1)))
	}
}

// port hands out the first block of n free ports from the program's base.
func (t *translator) port(program string, n int) int {
	base := 9200
	for _, p := range programs {
		if p.name == program {
			base = p.port
		}
	}
	for p := base; ; p++ {
		free := true
		for i := range n {
			if t.ports[p+i] {
				free = false
			}
		}
		if free {
			for i := range n {
				t.ports[p+i] = true
			}
			return p
		}
	}
}

// daemon converts one <daemon>.
func (t *translator) daemon(e Entry) {
	c := &daemonConv{t: t, label: "daemon " + oneLine(e.Cmd)}
	words, err := splitCommand(e.Cmd)
	if err != nil || len(words) == 0 {
		t.rep.unmapped(c.label, "", OperatorAction, fmt.Sprintf("cannot read the command: %v", err))
		return
	}
	if filepath.Base(words[0]) == "run_in_ops" && len(words) > 1 {
		words = words[1:]
	}
	c.boinc = filepath.Base(words[0])
	switch {
	case e.Disabled:
		t.rep.unmapped(c.label, "", Disabled, "not carried over")
		return
	case e.Host != "" && !t.mainHost(e.Host):
		t.rep.unmapped(c.label, "", OperatorAction, fmt.Sprintf("ran on host %s: run a supervisor there with its own project file listing it", e.Host))
		return
	}
	args := parseArgs(words[1:])
	c.convert(args)
	if c.failed {
		return
	}
	t.addDaemon(c, oneLine(e.Cmd))
}

// mainHost reports whether host is the project's main host.
func (t *translator) mainHost(host string) bool {
	main, _ := t.in.Config.Lookup("host")
	return host == main
}

// convert maps the program and its options.
func (c *daemonConv) convert(args []arg) {
	p := c.boinc
	var own func(a arg) bool // program-specific options; false: not one
	switch {
	case p == "feeder":
		c.program, own = "feeder", c.feederArg
	case p == "transitioner":
		c.program, own = "transitioner", func(arg) bool { return false }
	case p == "file_deleter":
		c.program, own = "file_deleter", c.fileDeleterArg
	case p == "db_purge":
		c.program, own = "db_purge", c.dbPurgeArg
	case p == "sample_bitwise_validator":
		c.program, own = "validator", c.validatorArg
		c.args = append(c.args, "--checker", "bitwise")
	case p == "sample_trivial_validator":
		c.program, own = "validator", c.validatorArg
		c.args = append(c.args, "--checker", "trust")
		c.notes = append(c.notes, "every output there is valid (as BOINC's trivial validator)")
	case p == "script_validator":
		c.program, own = "validator", c.validatorArg
		c.args = append(c.args, "--checker", "command")
	case p == "sample_assimilator" || p == "sample_dummy_assimilator" || p == "batch_collect_assimilator" || p == "single_job_assimilator":
		c.program, own = "assimilator", c.assimilatorArg
		c.args = append(c.args, "--handler", "copy")
		c.notes = append(c.notes, "the copy handler writes each job's outputs to results/<job>/<logical name> (results/<job>.error for a failed job), not where "+p+" put them")
	case p == "script_assimilator":
		c.program, own = "assimilator", c.assimilatorArg
		c.args = append(c.args, "--handler", "command")
	case p == "trickle_deadline":
		c.program, own = "trickle_handler", c.trickleArg
	case p == "trickle_credit":
		c.drop(OperatorAction, "BOINC's trickle_credit grants runtime × the host's benchmark; ours a fixed credit per CPU second: add a trickle_handler with "+
			"--credit-per-cpu-second X (0.0023 is 200 a day for 1 GFLOPS) and --credit-max-cpu-seconds set to its --max_runtime, and its --variety")
		return
	case p == "trickle_echo":
		c.drop(NoEquivalent, "BOINC's example trickle handler (echoes each message back); ours: trickle_handler --handler-cmd")
		return
	case p == "sample_work_generator":
		c.drop(NoEquivalent, "BOINC's example work generator; ours (work_generator) makes demo jobs too: add it to daemons: if wanted")
		return
	case p == "sample_substr_validator":
		c.drop(NoEquivalent, "checks stderr for a string; no built-in checker does: use validator --checker command with a script that does")
		return
	case strings.Contains(p, "validator"):
		c.drop(OperatorAction, "a validator of the project's own: port its comparison to our validator package (a Checker, see examples/validator) "+
			"or to a script for --checker command, and add it to daemons: with its --app")
		return
	case strings.Contains(p, "assimilator"):
		c.drop(OperatorAction, "an assimilator of the project's own: port it to our assimilator package (a Handler, see examples/assimilator) "+
			"or run it per job with --handler command, and add it to daemons: with its --app")
		return
	case strings.Contains(p, "trickle"):
		c.drop(OperatorAction, "a trickle handler of the project's own: port it to our trickle package (a Program) or run it per message with "+
			"trickle_handler --handler-cmd, and add it to daemons:")
		return
	case strings.Contains(p, "work_generator") || strings.Contains(p, "make_work"):
		c.drop(OperatorAction, "a work generator of the project's own: port it to our workgenerator package (an InputMaker or JobMaker), "+
			"or submit jobs with taskctl job submit / batch submit")
		return
	default:
		c.drop(OperatorAction, "a program of the project's own (or one this server has no counterpart for): port it, or run it beside ours")
		return
	}
	for _, a := range args {
		if !c.common(a) && !own(a) {
			c.unmappedArg(a, NoEquivalent, "an option "+p+" takes that ours has no counterpart for")
		}
	}
	if c.failed {
		return
	}
	switch c.program {
	case "validator", "assimilator":
		if c.app == "" {
			c.drop(OperatorAction, "no --app: ours needs one per app; add one per app to daemons:")
			return
		}
		c.args = append([]string{"--app", c.app}, c.args...)
	}
	if p == "script_validator" && !containsArg(c.args, "--compare-cmd") {
		c.drop(OperatorAction, "no --compare_script that ours can run (see above)")
	}
	if p == "script_assimilator" && !containsArg(c.args, "--handler-cmd") {
		c.drop(OperatorAction, "no --script that ours can run (see above)")
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

// common handles the options every BOINC daemon takes.
func (c *daemonConv) common(a arg) bool {
	switch a.name {
	case "d", "debug_level":
		c.t.debugLevels = append(c.t.debugLevels, c.boinc+" "+value(a, 0))
	case "mod":
		n, err1 := strconv.Atoi(value(a, 0))
		i, err2 := strconv.Atoi(value(a, 1))
		if err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
			c.unmappedArg(a, OperatorAction, "not a valid --mod N I; left out")
			return true
		}
		if c.program == "feeder" {
			c.unmappedArg(a, Differs, "feeders here are one per scheduler host, each caching its share: no --mod")
			return true
		}
		c.mod, c.index = n, i
	case "sleep_interval":
		if s, err := strconv.ParseFloat(value(a, 0), 64); err == nil && s > 0 {
			c.args = append(c.args, "--sleep", strconv.FormatFloat(s, 'f', -1, 64)+"s")
		} else {
			c.unmappedArg(a, OperatorAction, "not a number of seconds; left out")
		}
	case "one_pass":
		c.unmappedArg(a, Differs, "the supervisor runs daemons continuously; --one-pass is for a test or cron")
	case "app":
		switch c.program {
		case "validator", "assimilator":
			c.app = value(a, 0)
		default:
			c.unmappedArg(a, Differs, "ours serves every app")
		}
	case "h", "help", "v", "version":
	default:
		return false
	}
	return true
}

func value(a arg, i int) string {
	if i < len(a.values) {
		return a.values[i]
	}
	return ""
}

func (c *daemonConv) feederArg(a arg) bool {
	switch a.name {
	case "allapps":
		c.notes = append(c.notes, "caches every app's jobs, as --allapps did")
	case "priority_order":
		c.notes = append(c.notes, "jobs with priority > 0 are cached first, as --priority_order did")
	case "priority_order_create_time", "priority_asc", "random_order", "random_order_db", "by_batch", "batch_accel", "appids", "wmod":
		c.unmappedArg(a, Differs, "our feeder caches every app's unsent instances by id, priority > 0 first")
	case "purge_stale":
		c.unmappedArg(a, Differs, "our feeder keeps a cached instance until it is sent (it reclaims only slots a dead scheduler held)")
	default:
		return false
	}
	return true
}

func (c *daemonConv) fileDeleterArg(a arg) bool {
	switch a.name {
	case "dont_delete_antiques":
		c.args = append(c.args, "--orphan-age", "0")
		c.notes = append(c.notes, "--dont_delete_antiques: the orphan sweep is off (--orphan-age 0)")
	case "preserve_wu_files", "preserve_result_files", "input_files_only", "output_files_only":
		c.unmappedArg(a, NoEquivalent, "our file_deleter deletes a finished job's input and output files alike")
	case "dont_retry_errors", "no_db_update", "xml_doc_like", "download_dir", "appid":
		c.unmappedArg(a, NoEquivalent, "no such option")
	default:
		return false
	}
	return true
}

func (c *daemonConv) dbPurgeArg(a arg) bool {
	switch a.name {
	case "min_age_days":
		days, err := strconv.ParseFloat(value(a, 0), 64)
		if err != nil || days < 0 {
			c.unmappedArg(a, OperatorAction, "not a number of days; left out")
			return true
		}
		c.args = append(c.args, "--min-age", strconv.FormatFloat(days*24, 'f', -1, 64)+"h")
	case "max_wu_per_file":
		c.args = append(c.args, "--max-archive-rows", value(a, 0))
	case "gzip":
		c.notes = append(c.notes, "archives are gzip'd XML, as with --gzip")
	case "zip", "zlib":
		c.unmappedArg(a, Differs, "our archives are gzip'd XML (wu_archive_*.xml.gz, result_archive_*.xml.gz)")
	case "no_archive", "dont_delete":
		c.unmappedArg(a, NoEquivalent, "our db_purge always archives, then deletes")
	case "daily_dir", "max", "batch":
		c.unmappedArg(a, NoEquivalent, "no such option (--max-archive-rows bounds a file)")
	default:
		return false
	}
	return true
}

func (c *daemonConv) validatorArg(a arg) bool {
	switch a.name {
	case "init_script", "compare_script":
		c.script(a)
	case "credit_from_wu":
		c.unmappedArg(a, OperatorAction, "credit policy is per app here: taskctl app set --app "+c.appOr()+" --credit-policy fixed")
	case "credit_from_runtime", "no_credit", "max_granted_credit", "grant_claimed_credit", "post_assigned_credit", "update_credited_job", "check_punitive":
		c.unmappedArg(a, NoEquivalent, "credit follows the app's credit policy (taskctl app set --credit-policy fpops|fixed|median), granted once per valid instance")
	case "one_pass_N_WU", "min_wu_id", "max_wu_id", "wu_id", "dry_run":
		c.unmappedArg(a, NoEquivalent, "a testing option")
	default:
		return false
	}
	return true
}

func (c *daemonConv) appOr() string {
	if c.app != "" {
		return c.app
	}
	return "APP"
}

// scriptPath is where BOINC's script validator and assimilator find a
// script: in the project's bin directory.
func (c *daemonConv) scriptPath(s string) string {
	if filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(c.t.in.OldDir, "bin", s)
}

// script maps script_validator's --init_script and --compare_script. Ours
// append the files (A's, then B's) to the command; BOINC's name what to
// pass with tokens, "files" (and "files2") by default.
func (c *daemonConv) script(a arg) {
	words := strings.Fields(value(a, 0))
	if len(words) == 0 {
		c.unmappedArg(a, OperatorAction, "no script named")
		return
	}
	want, flag := []string{"files"}, "--init-cmd"
	if a.name == "compare_script" {
		want, flag = []string{"files", "files2"}, "--compare-cmd"
	}
	tokens := words[1:]
	if len(tokens) == 0 {
		tokens = want
	}
	if strings.Join(tokens, " ") != strings.Join(want, " ") {
		c.unmappedArg(a, OperatorAction, fmt.Sprintf("its arguments %q are not ours: our command checker appends the output files (%s) "+
			"and gives the result's name and id in TASKSERVER_RESULT_* variables; change the script, then set %s",
			strings.Join(tokens, " "), strings.Join(want, " then "), flag))
		return
	}
	c.args = append(c.args, flag, c.scriptPath(words[0]))
	if len(c.notes) == 0 {
		c.notes = append(c.notes, "exit statuses here: 0 valid (or agree), 1 invalid (or disagree), any other a transient error retried later; "+
			"BOINC took every non-zero status but its transient code as invalid: check the scripts exit 1 to reject")
	}
}

func (c *daemonConv) assimilatorArg(a arg) bool {
	switch a.name {
	case "script":
		words := strings.Fields(value(a, 0))
		if len(words) == 0 {
			c.unmappedArg(a, OperatorAction, "no script named")
			return true
		}
		tokens := words[1:]
		if len(tokens) == 0 {
			tokens = []string{"wu_id", "files"}
		}
		if strings.Join(tokens, " ") != "files" {
			c.unmappedArg(a, OperatorAction, fmt.Sprintf("its arguments %q are not ours: our command handler appends the canonical output files "+
				"and gives the job in TASKSERVER_JOB_NAME, _JOB_ID, _BATCH, _ERROR_MASK; change the script to take only the files, then set --handler-cmd",
				strings.Join(tokens, " ")))
			return true
		}
		c.args = append(c.args, "--handler-cmd", c.scriptPath(words[0]))
		c.notes = append(c.notes, "a failed job runs the script with no files and TASKSERVER_ERROR_MASK set, not \"--error N wu_name wu_id batch\"")
	case "dont_update_db":
		c.unmappedArg(a, NoEquivalent, "a testing option")
	default:
		return false
	}
	return true
}

func (c *daemonConv) trickleArg(a arg) bool {
	switch a.name {
	case "variety":
		c.app = value(a, 0) // names the daemon, as an app does
		c.args = append(c.args, "--variety", value(a, 0))
	case "extension_period":
		s, err := strconv.ParseFloat(value(a, 0), 64)
		if err != nil || s <= 0 {
			c.unmappedArg(a, OperatorAction, "not a number of seconds; left out")
			return true
		}
		c.args = append(c.args, "--extend-deadline", time.Duration(s*float64(time.Second)).String())
	case "extension_timeframe":
		c.unmappedArg(a, Differs, "ours moves the deadline to at least now + --extend-deadline on every message, whenever the deadline is")
	default:
		return false
	}
	return true
}

// nameUnsafe matches what a daemon name may hold besides letters and digits.
var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// addDaemon adds a converted daemon, or merges a --mod replica into the
// entry it belongs to.
func (t *translator) addDaemon(c *daemonConv, cmd string) {
	name := c.program
	if c.app != "" {
		name += "-" + nameUnsafe.ReplaceAllString(c.app, "_")
	}
	if i, ok := t.byName[name]; ok {
		d := &t.proj.Daemons[i]
		switch {
		case c.mod > 1 && d.Spec.Replicas == c.mod:
			d.From = append(d.From, cmd)
			t.rep.mapped(c.label, "", fmt.Sprintf("replica %d of %d of %s", c.index, c.mod, name), "daemons: "+name)
			return
		case d.From == nil && c.program == "feeder":
			// BOINC's feeder: its options join those from <config>.
			d.Spec.Args = append(d.Spec.Args, c.args...)
			d.From = append(d.From, cmd)
			t.rep.mapped(c.label, "", strings.Join(c.notes, "; "), "daemons: "+name)
			return
		default:
			t.rep.unmapped(c.label, "", NoEquivalent, fmt.Sprintf("a second %s for the same work: one entry serves it here (replicas: for more processes)", name))
			return
		}
	}
	spec := config.DaemonSpec{Program: c.program, Args: c.args}
	if name != c.program {
		spec.Name = name
	}
	if c.mod > 1 {
		spec.Replicas = c.mod
	}
	d := Daemon{Spec: spec}
	if cmd != "" {
		d.From = []string{cmd}
		note := strings.Join(c.notes, "; ")
		if c.mod > 1 {
			note = strings.TrimPrefix(note+fmt.Sprintf("; replica %d of %d: the supervisor runs all %d (replicas: %d)", c.index, c.mod, c.mod, c.mod), "; ")
		}
		t.rep.mapped(c.label, "", note, "daemons: "+name)
	}
	t.byName[name] = len(t.proj.Daemons)
	t.proj.Daemons = append(t.proj.Daemons, d)
}
