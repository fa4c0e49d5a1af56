// Package boinctest makes "BOINC" databases for the tests and benchmarks of
// `taskctl import boinc`: an empty database in the fixture schema
// (testdata/boinc_schema.sql, written from the facts of BOINC's
// db/schema.sql) and a generated project in it: platforms, an app with
// signed versions, users, teams, hosts, and jobs in every state the import
// must tell apart (unsent, in progress, waiting for validation, finished).
package boinctest

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

//go:embed testdata/boinc_schema.sql
var schemaSQL string

// Tables are the fixture's tables, in the order the schema creates them.
var Tables = []string{"platform", "app", "app_version", "user", "team", "host", "workunit", "result"}

// NewDatabase creates an empty database in the fixture schema on the test
// server and returns its DSN and name; it is dropped at the end of tb.
func NewDatabase(tb testing.TB) (dsn, name string) {
	tb.Helper()
	cfg, err := mysql.ParseDSN(storetest.ServerDSN())
	if err != nil {
		tb.Fatalf("parse TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatalf("open test server: %v", err)
	}
	defer admin.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name = "boinctest_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET latin1"); err != nil {
		tb.Fatalf("create BOINC test database: %v", err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			tb.Errorf("drop %s: %v", name, err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Errorf("drop BOINC test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	dsn = cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
	}
	defer db.Close()
	for _, stmt := range strings.Split(stripComments(schemaSQL), ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			tb.Fatalf("BOINC fixture schema: %v\n%s", err, stmt)
		}
	}
	return dsn, name
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// Project describes a generated BOINC project.
type Project struct {
	Users, Hosts, Teams int
	// Jobs is the number of jobs of each in-flight kind: one instance in
	// progress and one unsent; one unsent only; one reported and waiting
	// for validation with one in progress. Finished is the number of
	// finished (assimilated) jobs, which the import skips.
	Jobs, Finished int
	// Now is the project's clock (Unix seconds); deadlines lie after it.
	Now int64
	// DownloadURL and UploadURL are the old project's URLs (config.xml's
	// download_url and upload_url); Fanout its uldl_dir_fanout.
	DownloadURL, UploadURL string
	Fanout                 int
	// DownloadDir, when set, receives the app version files, flat, as
	// BOINC's update_versions stages them, and their xml_doc carries no
	// md5_cksum (update_versions writes none); when empty, the xml_doc
	// carries it and no file is written.
	DownloadDir string
	// CodeSignKey signs the app version files; UploadKey the upload
	// certificates of the instances' outputs. Nil keys make fixed
	// signature text.
	CodeSignKey, UploadKey *rsa.PrivateKey
}

// App version ids, names and the versions the generator makes.
const (
	AppName     = "example"
	PlatformID1 = 1
	PlatformID2 = 2
)

// AppFile is the content of an app version's main program.
func AppFile(platform, versionNum int) []byte {
	return []byte(fmt.Sprintf("#!/bin/sh\n# example app, platform %d, version %d\n", platform, versionNum))
}

// AppFileName is the physical name of an app version's main program.
func AppFileName(platform, versionNum int) string {
	return fmt.Sprintf("example_%d_p%d", versionNum, platform)
}

// Hash is BOINC's fan-out directory of a file name (sched_util_basic.cpp
// filename_hash: hex digits 1 to 7 of the name's md5, modulo the fan-out).
func Hash(name string, fanout int) string {
	sum := md5.Sum([]byte(name))
	x, _ := strconv.ParseInt(hex.EncodeToString(sum[:])[1:8], 16, 64)
	return strconv.FormatInt(x%int64(fanout), 16)
}

// Authenticator is user id's account key.
func Authenticator(id int) string { return hexOf("auth", id) }

// Email is user id's e-mail address.
func Email(id int) string { return fmt.Sprintf("user%d@example.org", id) }

// Password is user id's password.
func Password(id int) string { return fmt.Sprintf("secret-%d", id) }

// HostCPID is host id's host_cpid.
func HostCPID(id int) string { return hexOf("host", id) }

func hexOf(kind string, id int) string {
	sum := md5.Sum([]byte(kind + strconv.Itoa(id)))
	return hex.EncodeToString(sum[:])
}

// batchRows is how many rows one generated INSERT carries.
const batchRows = 1000

// inserter collects rows for one multi-row INSERT.
type inserter struct {
	db     *sql.DB
	head   string
	nparam int
	rows   int
	args   []any
}

func (in *inserter) add(ctx context.Context, vals ...any) error {
	in.args = append(in.args, vals...)
	in.rows++
	if in.rows == batchRows {
		return in.flush(ctx)
	}
	return nil
}

func (in *inserter) flush(ctx context.Context) error {
	if in.rows == 0 {
		return nil
	}
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", len(in.args)/in.rows), ",") + ")"
	q := in.head + " VALUES " + strings.TrimSuffix(strings.Repeat(one+",", in.rows), ",")
	_, err := in.db.ExecContext(ctx, q, in.args...)
	in.args, in.rows = in.args[:0], 0
	if err != nil {
		return fmt.Errorf("%s: %w", in.head, err)
	}
	return nil
}

// Fill generates p in the empty fixture database at dsn.
func Fill(ctx context.Context, dsn string, p Project) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if p.Fanout == 0 {
		p.Fanout = 1024
	}
	if err := fillCatalog(ctx, db, p); err != nil {
		return err
	}
	if err := fillPeople(ctx, db, p); err != nil {
		return err
	}
	return fillJobs(ctx, db, p)
}

func (p Project) sign(k *rsa.PrivateKey, data []byte) (string, error) {
	if k == nil {
		return strings.Repeat("ab", 64) + "\n.\n", nil
	}
	return keys.Sign(k, data)
}

func fillCatalog(ctx context.Context, db *sql.DB, p Project) error {
	t := p.Now - 86400*400
	if _, err := db.ExecContext(ctx, `INSERT INTO platform (id, create_time, name, user_friendly_name) VALUES
		(1, ?, 'x86_64-pc-linux-gnu', 'Linux on x86_64'), (2, ?, 'windows_x86_64', 'Windows on x86_64')`, t, t); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO app (id, create_time, name, user_friendly_name, min_version, weight, beta)
		VALUES (1, ?, ?, 'Example application', 0, 1, 0)`, t, AppName); err != nil {
		return err
	}
	id := 0
	for _, plat := range []int{PlatformID1, PlatformID2} {
		for _, vnum := range []int{700, 710} {
			id++
			doc, err := p.versionDoc(plat, vnum)
			if err != nil {
				return err
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO app_version (id, create_time, appid, version_num, platformid, xml_doc, deprecated, plan_class)
				VALUES (?, ?, 1, ?, ?, ?, ?, '')`, id, t+int64(vnum), vnum, plat, doc, vnum == 700); err != nil {
				return err
			}
		}
	}
	return nil
}

// versionDoc is app_version.xml_doc as BOINC's update_versions writes it.
func (p Project) versionDoc(plat, vnum int) (string, error) {
	name := AppFileName(plat, vnum)
	content := AppFile(plat, vnum)
	sig, err := p.sign(p.CodeSignKey, content)
	if err != nil {
		return "", err
	}
	md5Line := ""
	if p.DownloadDir != "" {
		if err := os.WriteFile(filepath.Join(p.DownloadDir, name), content, 0o644); err != nil {
			return "", err
		}
	} else {
		sum := md5.Sum(content)
		md5Line = "    <md5_cksum>" + hex.EncodeToString(sum[:]) + "</md5_cksum>\n"
	}
	return "<file_info>\n    <name>" + name + "</name>\n    <url>" + p.DownloadURL + "/" + name + "</url>\n    <executable/>\n" +
		"    <file_signature>\n" + sig + "    </file_signature>\n    <nbytes>" + strconv.Itoa(len(content)) + "</nbytes>\n" + md5Line +
		"</file_info>\n<app_version>\n    <app_name>" + AppName + "</app_name>\n    <version_num>" + strconv.Itoa(vnum) + "</version_num>\n" +
		"    <api_version>7.20.0</api_version>\n<file_ref>\n    <file_name>" + name + "</file_name>\n    <main_program/>\n</file_ref>\n</app_version>\n", nil
}

// UserTeam is the team of user id (0: none) in a project of teams teams.
func UserTeam(id, teams int) int {
	if teams == 0 || id%3 == 0 {
		return 0
	}
	return id%teams + 1
}

// UserCredit is user id's total credit.
func UserCredit(id int) float64 { return float64(id%997)*12.5 + 0.25 }

// HostCredit is host id's total credit.
func HostCredit(id int) float64 { return float64(id%991)*3.5 + 0.5 }

// bcryptUsers is how many of the first users hold BOINC's newer password
// form (bcrypt of the md5); bcrypt is slow on purpose, so the rest hold
// the md5.
const bcryptUsers = 2

func fillPeople(ctx context.Context, db *sql.DB, p Project) error {
	users := &inserter{db: db, head: `INSERT INTO user (id, create_time, email_addr, name, authenticator, country, postal_code, total_credit,
		expavg_credit, expavg_time, global_prefs, project_prefs, teamid, venue, url, send_email, show_hosts, has_profile, cross_project_id,
		passwd_hash, email_validated)`}
	teamCredit := map[int]float64{}
	teamUsers := map[int]int{}
	for id := 1; id <= p.Users; id++ {
		hash := passwd.ClientHash(Password(id), Email(id))
		if id <= bcryptUsers {
			h, err := passwd.Hash(hash, 4)
			if err != nil {
				return err
			}
			hash = h
		}
		team := UserTeam(id, p.Teams)
		teamCredit[team] += UserCredit(id)
		teamUsers[team]++
		var prefs, country, url any
		if id%2 == 0 {
			prefs = "<project_preferences><resource_share>100</resource_share></project_preferences>"
			country, url = "Germany", "https://example.org/~u"+strconv.Itoa(id)
		}
		if err := users.add(ctx, id, p.Now-86400*300+int64(id), Email(id), "Volunteer "+strconv.Itoa(id), Authenticator(id), country, nil,
			UserCredit(id), UserCredit(id)/100, float64(p.Now-3600), "<global_preferences><run_on_batteries>0</run_on_batteries></global_preferences>",
			prefs, team, "", url, id%2, 1, id%5 == 0, hexOf("cpid", id), hash, 1); err != nil {
			return err
		}
	}
	if err := users.flush(ctx); err != nil {
		return err
	}
	teams := &inserter{db: db, head: `INSERT INTO team (id, create_time, userid, name, name_lc, url, type, name_html, description, nusers,
		country, total_credit, expavg_credit, expavg_time, joinable)`}
	for id := 1; id <= p.Teams; id++ {
		name := "Team " + strconv.Itoa(id)
		if err := teams.add(ctx, id, p.Now-86400*200, min(id, p.Users), name, strings.ToLower(name), nil, 1, nil, "A team", teamUsers[id],
			"France", teamCredit[id], teamCredit[id]/100, float64(p.Now-3600), 1); err != nil {
			return err
		}
	}
	if err := teams.flush(ctx); err != nil {
		return err
	}
	hosts := &inserter{db: db, head: `INSERT INTO host (id, create_time, userid, rpc_seqno, rpc_time, total_credit, expavg_credit, expavg_time,
		timezone, domain_name, serialnum, last_ip_addr, on_frac, active_frac, p_ncpus, p_vendor, p_model, p_fpops, p_iops, p_membw, os_name,
		os_version, m_nbytes, m_cache, m_swap, d_total, d_free, n_bwup, n_bwdown, credit_per_cpu_sec, venue, nresults_today, avg_turnaround,
		host_cpid, external_ip_addr, product_name)`}
	for id := 1; id <= p.Hosts; id++ {
		user := 0
		if p.Users > 0 {
			user = (id-1)%p.Users + 1
		}
		if err := hosts.add(ctx, id, p.Now-86400*100+int64(id), user, 10+id%50, p.Now-int64(id%86400), HostCredit(id), HostCredit(id)/50,
			float64(p.Now-7200), 3600, "host"+strconv.Itoa(id), "[BOINC|7.20.2]", "10.0.0.1", 0.9, 0.8, 4, "GenuineIntel",
			"Intel(R) Core(TM) i5", 3e9, 9e9, 1e9, "Linux Debian", "6.1.0", 8e9, 8e6, 2e9, 5e11, 2e11, 1e6, 5e6, 0, "", id%7, 40000.0,
			HostCPID(id), "203.0.113.7", ""); err != nil {
			return err
		}
	}
	return hosts.flush(ctx)
}

// Kinds of generated job: the suffix of its name says what it is.
const (
	// JobInProgress has instance _0 in progress and _1 unsent.
	JobInProgress = "running"
	// JobUnsent has one unsent instance.
	JobUnsent = "unsent"
	// JobToValidate has _0 reported (success, waiting for the validator)
	// and _1 in progress.
	JobToValidate = "tovalidate"
	// JobFinished is assimilated: both instances valid.
	JobFinished = "finished"
)

// JobName is the name of the n-th generated job of kind.
func JobName(kind string, n int) string { return fmt.Sprintf("wu_%s_%d", kind, n) }

// InputName is the physical name of job's input file.
func InputName(job string) string { return job + "_in" }

func fillJobs(ctx context.Context, db *sql.DB, p Project) error {
	wus := &inserter{db: db, head: `INSERT INTO workunit (id, create_time, appid, name, xml_doc, batch, rsc_fpops_est, rsc_fpops_bound,
		rsc_memory_bound, rsc_disk_bound, need_validate, canonical_resultid, canonical_credit, transition_time, delay_bound, error_mask,
		file_delete_state, assimilate_state, hr_class, opaque, min_quorum, target_nresults, max_error_results, max_total_results,
		max_success_results, result_template_file, priority)`}
	results := &inserter{db: db, head: `INSERT INTO result (id, create_time, workunitid, server_state, outcome, client_state, hostid, userid,
		report_deadline, sent_time, received_time, name, cpu_time, xml_doc_in, xml_doc_out, stderr_out, batch, file_delete_state,
		validate_state, claimed_credit, granted_credit, opaque, random, app_version_num, appid, exit_status, teamid, priority, elapsed_time,
		flops_estimate, app_version_id)`}
	wuID, resID := 0, 0
	const delay = 7 * 86400
	for _, kind := range []string{JobInProgress, JobUnsent, JobToValidate, JobFinished} {
		n := p.Jobs
		if kind == JobFinished {
			n = p.Finished
		}
		for i := 0; i < n; i++ {
			wuID++
			name := JobName(kind, i)
			needValidate, canonical, assim, fds := 0, 0, 0, 0
			if kind == JobToValidate {
				needValidate = 1
			}
			if kind == JobFinished {
				canonical, assim, fds = resID+1, 2, 1
			}
			in := InputName(name)
			doc := "<file_info>\n    <name>" + in + "</name>\n    <url>" + p.DownloadURL + "/" + Hash(in, p.Fanout) + "/" + in + "</url>\n" +
				"    <md5_cksum>" + hexOf("in", wuID) + "</md5_cksum>\n    <nbytes>1024</nbytes>\n</file_info>\n<workunit>\n" +
				"    <command_line>--seed " + strconv.Itoa(wuID) + "</command_line>\n    <file_ref>\n        <file_name>" + in + "</file_name>\n" +
				"        <open_name>in</open_name>\n    </file_ref>\n</workunit>\n"
			if err := wus.add(ctx, wuID, p.Now-3600, 1, name, doc, 0, 1e12, 1e13, 1e8, 1e9, needValidate, canonical, 0, p.Now+3600, delay, 0,
				fds, assim, 0, 0, 1, 2, 3, 6, 3, "templates/example_out", 0); err != nil {
				return err
			}
			for slot := 0; slot < 2; slot++ {
				if kind == JobUnsent && slot == 1 {
					break
				}
				resID++
				rname := fmt.Sprintf("%s_%d", name, slot)
				state, outcome, vstate, host, sent, deadline, received := 2, 0, 0, 0, int64(0), int64(0), int64(0)
				switch {
				case kind == JobFinished:
					state, outcome, vstate, host, sent, received = 5, 1, 1, (wuID+slot)%max(p.Hosts, 1)+1, p.Now-7200, p.Now-3600
				case kind == JobToValidate && slot == 0:
					state, outcome, host, sent, received = 5, 1, (wuID+slot)%max(p.Hosts, 1)+1, p.Now-7200, p.Now-600
				case (kind == JobInProgress && slot == 0) || (kind == JobToValidate && slot == 1):
					state, host, sent = 4, (wuID+slot)%max(p.Hosts, 1)+1, p.Now-1800
				}
				if host > p.Hosts {
					host = 0
				}
				user := 0
				if host > 0 && p.Users > 0 {
					user = (host-1)%p.Users + 1
					deadline = sent + delay
				}
				out := rname + "_0"
				sig, err := p.sign(p.UploadKey, []byte("<name>"+out+"</name><max_nbytes>65536</max_nbytes>"))
				if err != nil {
					return err
				}
				docIn := "<file_info>\n    <name>" + out + "</name>\n    <generated_locally/>\n    <upload_when_present/>\n" +
					"    <max_nbytes>65536</max_nbytes>\n    <url>" + p.UploadURL + "</url>\n<xml_signature>\n" + sig + "</xml_signature>\n" +
					"</file_info>\n<result>\n    <name>" + rname + "</name>\n    <wu_name>" + name + "</wu_name>\n    <file_ref>\n" +
					"        <file_name>" + out + "</file_name>\n        <open_name>out</open_name>\n        <copy_file/>\n    </file_ref>\n</result>\n"
				docOut, granted := "", 0.0
				if state == 5 {
					docOut = "<file_info>\n    <name>" + out + "</name>\n    <nbytes>12</nbytes>\n    <max_nbytes>65536</max_nbytes>\n" +
						"    <md5_cksum>" + hexOf("out", resID) + "</md5_cksum>\n</file_info>\n"
					if kind == JobFinished {
						granted = 10
					}
				}
				if err := results.add(ctx, resID, p.Now-3600, wuID, state, outcome, 0, host, user, deadline, sent, received, rname, 0, docIn,
					docOut, "", 0, 0, vstate, 0, granted, 0, resID*7919%100000, 710, 1, 0, 0, 0, 0, 0, map[bool]int{true: 2, false: 0}[host > 0]); err != nil {
					return err
				}
			}
		}
	}
	if err := wus.flush(ctx); err != nil {
		return err
	}
	return results.flush(ctx)
}

// ReadOnlyDSN creates a server user that may only SELECT from database
// name and returns dsn with that user's credentials; the user is dropped
// at the end of tb. The import must need nothing more.
func ReadOnlyDSN(tb testing.TB, dsn, name string) string {
	tb.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatalf("parse %s: %v", dsn, err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
	}
	defer admin.Close()
	user := "ro_" + name[len(name)-12:]
	ctx := context.Background()
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'readonly'",
		"CREATE USER '" + user + "'@'localhost' IDENTIFIED BY 'readonly'",
		"GRANT SELECT ON " + name + ".* TO '" + user + "'@'%'",
		"GRANT SELECT ON " + name + ".* TO '" + user + "'@'localhost'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	tb.Cleanup(func() {
		db, err := sql.Open("mysql", storetest.ServerDSN())
		if err != nil {
			return
		}
		defer db.Close()
		for _, host := range []string{"%", "localhost"} {
			if _, err := db.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'"+host+"'"); err != nil {
				tb.Errorf("drop user %s: %v", user, err)
			}
		}
	})
	cfg.User, cfg.Passwd = user, "readonly"
	return cfg.FormatDSN()
}
