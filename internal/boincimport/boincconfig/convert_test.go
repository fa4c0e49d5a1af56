package boincconfig

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
)

// fixtureOldDir is where the fixture's config.xml says the project is.
const fixtureOldDir = "/home/boincadm/projects/ringsearch"

// oldProject copies the fixture project into a temporary directory,
// rewriting its absolute paths to point there, and gives it a key
// directory holding the keys a BOINC server has.
func oldProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"config.xml", "config_aux.xml", "plan_class_spec.xml"} {
		body, err := os.ReadFile(filepath.Join("testdata", "oldproject", name))
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.ReplaceAll(body, []byte(fixtureOldDir), []byte(dir))
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"upload_private", "upload_public", "code_sign_public", "code_sign_private"} {
		if err := os.WriteFile(filepath.Join(dir, "keys", k), []byte("key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const newDSN = "taskserver:pw@tcp(127.0.0.1:3306)/ringsearch_new"

// loadCommon runs a program's shared flags over the written file, as every
// program's Before hook does, and returns what its Config would hold.
func loadCommon(t *testing.T, path string) (config.Common, string) {
	t.Helper()
	var com config.Common
	var spec string
	app := &cli.App{
		Name:   "x",
		Flags:  append(config.CommonFlags("127.0.0.1:0"), config.PlanClassSpecFlag()),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			var err error
			com, err = config.CommonFrom(c)
			spec = c.String(config.FlagPlanClassSpec)
			return err
		},
	}
	if err := app.Run([]string{"x", "--config", path}); err != nil {
		t.Fatalf("loading %s with the shared flags: %v", path, err)
	}
	return com, spec
}

// A typical project's configuration converts into a file our programs'
// shared flags and the supervisor accept, with the plan classes copied,
// the keys and directories of the old project named where they are, and
// every option it could not carry over listed with its reason.
func TestConvertRealisticProject(t *testing.T) {
	t.Parallel()
	old := oldProject(t)
	newDir := filepath.Join(t.TempDir(), "new")
	out := filepath.Join(newDir, "project.yaml")
	dry, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN, DryRun: true})
	if err != nil {
		t.Fatalf("Convert, dry run: %v", err)
	}
	if _, err := os.Stat(newDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dry run made the new project directory: %v", err)
	}
	res, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN})
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	rep := res.Report
	body, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dry.File, body) || !bytes.Equal(res.File, body) {
		t.Errorf("the dry run's file or the returned one differs from the file written")
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("project file mode = %v (%v), want 0600: it holds the database password", fi.Mode(), err)
	}

	values, err := config.Parse(body)
	if err != nil {
		t.Fatalf("config.Parse of the written file: %v\n%s", err, body)
	}
	want := map[string]string{
		"db-dsn": newDSN, "project-dir": newDir, "url-base": "https://ringsearch.example.org/ringsearch",
		"project-name": "Ring Search@Home", "fanout": "1024", "max-results-per-rpc": "20",
		"daily-result-quota": "200", "gpu-quota-multiplier": "4", "max-in-progress-per-cpu": "2",
		"max-in-progress-per-gpu": "8", "request-delay": "31s", "next-rpc-delay": "24h0m0s",
		"upload-grace": "2h0m0s", "account-creation": "true", "plan-class-spec": PlanClassFile,
		"app-max-in-progress": "ringsearch_gpu=16",
		"upload-key":          filepath.Join(old, "keys", "upload_private"),
		"code-sign-key":       filepath.Join(old, "keys", "code_sign_public"),
		"download-dir":        filepath.Join(old, "download"),
		"upload-dir":          filepath.Join(old, "upload"),
	}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("key %s = %q, want %q", k, values[k], v)
		}
	}
	if len(values) != len(want) {
		t.Errorf("file has %d keys, want %d: %v", len(values), len(want), values)
	}

	com, spec := loadCommon(t, out)
	if com.DBDSN != newDSN || com.DownloadDir != filepath.Join(old, "download") || com.Fanout != 1024 {
		t.Errorf("shared flags loaded from the file = %+v", com)
	}
	specs, err := planclass.Load(com.Path(spec), true)
	if err != nil {
		t.Fatalf("plan classes named by the file: %v", err)
	}
	if got := strings.Join(specs.Names(), ","); got != "cuda_ring,mt,vbox64" {
		t.Errorf("copied plan classes = %s", got)
	}

	daemons, err := config.Daemons(body)
	if err != nil {
		t.Fatalf("config.Daemons of the written file: %v", err)
	}
	var got []string
	for _, d := range daemons {
		for _, r := range d.Expand() {
			got = append(got, r.Name+" "+r.Program+" "+strings.Join(r.Args, " "))
		}
	}
	wantDaemons := []string{
		"feeder feeder --slots 500 --batch 200 --listen 127.0.0.1:9103",
		"scheduler scheduler --listen 127.0.0.1:9101",
		"transitioner@0 transitioner --mod 2 --mod-index 0 --listen 127.0.0.1:9120",
		"transitioner@1 transitioner --mod 2 --mod-index 1 --listen 127.0.0.1:9121",
		"validator-ringsearch validator --app ringsearch --checker bitwise --sleep 10s --listen 127.0.0.1:9140",
		"validator-ringsearch_gpu validator --app ringsearch_gpu --checker command --init-cmd " + filepath.Join(old, "bin", "check_ring.py") +
			" --compare-cmd " + filepath.Join(old, "bin", "compare_rings.py") + " --listen 127.0.0.1:9141",
		"assimilator-ringsearch assimilator --app ringsearch --handler copy --listen 127.0.0.1:9150",
		"assimilator-ringsearch_gpu assimilator --app ringsearch_gpu --handler command --handler-cmd " + filepath.Join(old, "bin", "store_rings.py") +
			" --listen 127.0.0.1:9151",
		"file_deleter file_deleter --orphan-age 0 --listen 127.0.0.1:9160",
		"db_purge db_purge --min-age 168h --max-archive-rows 5000 --listen 127.0.0.1:9170",
		"trickle_handler-ringsearch_progress trickle_handler --variety ringsearch_progress --extend-deadline 24h0m0s --listen 127.0.0.1:9190",
	}
	if strings.Join(got, "\n") != strings.Join(wantDaemons, "\n") {
		t.Errorf("daemons:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(wantDaemons, "\n     "))
	}

	for option, kind := range map[string]Kind{
		"upload_url": OperatorAction,
		"key_dir":    OperatorAction, // code_sign_private on the server
		"daemon ringsearch_work_generator -d 3 --app ringsearch": OperatorAction,
		"daemon census":                                     OperatorAction,
		"plan_class_spec.xml: vbox64":                       OperatorAction,
		"task db_dump -d 2 --dump_spec ../db_dump_spec.xml": OperatorAction,
		"daemon sample_trivial_validator --app test_app":    Disabled,
		"task run_in_ops ./team_import.php":                 Disabled,
		"ring_search_motd":                                  NoEquivalent,
		"ban_os":                                            NoEquivalent,
		"locality_scheduling":                               NoEquivalent,
		"show_results":                                      NoEquivalent,
		"shmem_key":                                         NoEquivalent,
		"min_core_client_version":                           NoEquivalent,
		"sched_debug_level":                                 Differs,
		"daemon file_deleter -d 3 --dont_delete_antiques --preserve_result_files: --preserve_result_files": NoEquivalent,
	} {
		found := rep.Find(option)
		if len(found) != 1 || found[0].Kind != kind {
			t.Errorf("report for %q = %+v, want one entry of kind %q", option, found, kind)
		}
	}
	// Every option of <config> is accounted for, mapped or not.
	cfg, err := ParseConfig(mustRead(t, filepath.Join(old, "config.xml")))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range rep.Mapped {
		seen[m.Option] = true
	}
	for _, u := range rep.Unmapped {
		seen[u.Option] = true
	}
	for _, o := range cfg.Options {
		if !seen[o.Name] {
			t.Errorf("option %s is neither carried over nor listed", o.Name)
		}
	}

	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "s3cr/et@pw") {
		t.Error("the report shows the old database password")
	}
	for _, s := range []string{"needs operator action:", "upload_url", "db_passwd = (hidden)"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("report text lacks %q:\n%s", s, text.String())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(newDir, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An existing project file, or plan classes already in the new project,
// are never replaced without Force; with it they are, whole.
func TestConvertRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	old := oldProject(t)
	newDir := t.TempDir()
	out := filepath.Join(newDir, "project.yaml")
	if err := os.WriteFile(out, []byte("db-dsn: mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Convert over an existing file: err = %v, want ErrExists", err)
	}
	if got := string(mustRead(t, out)); got != "db-dsn: mine\n" {
		t.Errorf("existing file changed to %q", got)
	}
	if _, err := os.Stat(filepath.Join(newDir, PlanClassFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plan classes written although the conversion was refused: %v", err)
	}
	if _, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN, Force: true}); err != nil {
		t.Fatalf("Convert with Force: %v", err)
	}
	if v, _ := config.Parse(mustRead(t, out)); v["db-dsn"] != newDSN {
		t.Errorf("forced file db-dsn = %q, want the new one", v["db-dsn"])
	}
	// Plan classes there now: refused again without Force.
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN}); !errors.Is(err, ErrExists) {
		t.Fatalf("Convert over existing plan classes: err = %v, want ErrExists", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("project file written although the conversion was refused: %v", err)
	}
}

// Input that does not parse stops the conversion with an error naming the
// file and the problem, and nothing is written.
func TestConvertRefusesMalformedInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, body, want string
	}{
		{"truncated config", "config.xml", "<boinc><config><db_name>x</db_name>", "config.xml: <config>: XML syntax error on line 1: unexpected EOF"},
		{"wrong root", "config.xml", "<project><config/></project>", "root element <project>, want <boinc>"},
		{"no config", "config.xml", "<boinc><daemons/></boinc>", "no <config> element"},
		{"mismatched tags", "config.xml", "<boinc><config><db_name>x</db_host></config></boinc>", "config.xml"},
		{"option with elements", "config.xml", "<boinc><config><db_name><x/></db_name></config></boinc>", "<db_name> holds an element <x>"},
		{"daemon without cmd", "config.xml", "<boinc><config/><daemons><daemon><host>a</host></daemon></daemons></boinc>", "has no <cmd>"},
		{"plan class unknown element", PlanClassFile,
			"<plan_classes><plan_class><name>cuda_x</name><gpu_typo>nvidia</gpu_typo></plan_class></plan_classes>", `"cuda_x"`},
		{"plan class truncated", PlanClassFile, "<plan_classes><plan_class>", "plan_class_spec.xml"},
		{"config_aux truncated", "config_aux.xml", "<config><max_jobs_in_progress>", "config_aux.xml: XML syntax error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old := oldProject(t)
			if err := os.WriteFile(filepath.Join(old, tc.file), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			newDir := filepath.Join(t.TempDir(), "new")
			out := filepath.Join(newDir, "project.yaml")
			_, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out, DBDSN: newDSN})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Convert with a malformed %s: err = %v, want it to contain %q", tc.file, err, tc.want)
			}
			if _, err := os.Stat(newDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("new project directory made although the conversion failed: %v", err)
			}
		})
	}
}

// Without the new database's DSN, db-dsn is the old database's, and the
// report says to change it.
func TestConvertWithoutNewDSN(t *testing.T) {
	t.Parallel()
	old := oldProject(t)
	newDir := t.TempDir()
	out := filepath.Join(newDir, "p.yaml")
	res, err := Convert(Options{OldDir: old, ProjectDir: newDir, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	v, _ := config.Parse(mustRead(t, out))
	if v["db-dsn"] != "boincadm:s3cr/et@pw@tcp(db.example.org:3306)/ringsearch" {
		t.Errorf("db-dsn = %q, want the old database's", v["db-dsn"])
	}
	if u := rep.Find("db_name"); len(u) != 1 || u[0].Kind != OperatorAction {
		t.Errorf("report for db_name = %+v, want an operator action", u)
	}
}
