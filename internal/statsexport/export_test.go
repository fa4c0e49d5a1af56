package statsexport

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// project is a database holding what the export must write and what it
// must leave out.
type project struct {
	st *store.Store
	// ids by role
	alice, bob, poor, deleted      int64
	teamA, teamPoor, teamOrphan    int64
	hostAlice, hostBob, hostOrphan int64
}

// setup fills a fresh database: alice (in team A, which she founded; a
// name to escape, country, url, profile; shows her computers), bob (no
// team, hides his computers), poor (no credit) and a deleted account;
// team A, a team without credit and one whose founder's row is gone;
// hosts of alice and bob, one without credit, one marked deleted, one of
// no user and one whose owner's row is gone.
func setup(t *testing.T) *project {
	t.Helper()
	st := storetest.New(t)
	p := &project{st: st}
	storetest.App(t, st, storetest.AppOptions{Name: "sim", UserFriendlyName: "Simulation & <more>"})
	storetest.App(t, st, storetest.AppOptions{Name: "old", UserFriendlyName: "Old app", Deprecated: true})

	p.alice = storetest.User(t, st, storetest.UserOptions{Name: "Alice José <& Co>", EmailAddr: "alice@example.org",
		CreateTime: 1000, TotalCredit: 1234.5, ExpavgCredit: 12.25, ExpavgTime: 1700000000.5, CrossProjectID: "cpid-alice"}).ID
	p.bob = storetest.User(t, st, storetest.UserOptions{Name: "bob", EmailAddr: "bob@example.org", CreateTime: 2000,
		TotalCredit: 10, ExpavgCredit: 1, ExpavgTime: 1700000001, CrossProjectID: "cpid-bob"}).ID
	p.poor = storetest.User(t, st, storetest.UserOptions{Name: "poor", CreateTime: 3000, CrossProjectID: "x"}).ID
	p.deleted = storetest.User(t, st, storetest.UserOptions{Name: "gone", CreateTime: 4000, TotalCredit: 99,
		Authenticator: "deleted_1700000000_5", CrossProjectID: "y"}).ID

	p.teamA = insertTeam(t, st, p.alice, "Team A & friends", 1300.25, 13.5)
	p.teamPoor = insertTeam(t, st, p.bob, "Team without credit", 0, 0)
	p.teamOrphan = insertTeam(t, st, 987654, "Orphans", 1, 0.5)
	storetest.Exec(t, st, `UPDATE team SET url = 'https://a.example.org/?x=1&y=2', name_html = '<b>A</b>',
description = 'We crunch.', country = 'Germany', type = 4, create_time = 1500 WHERE id = ?`, p.teamA)
	storetest.Exec(t, st, `UPDATE user SET teamid = ?, country = 'Germany', url = 'alice.example.org', has_profile = 1
WHERE id = ?`, p.teamA, p.alice)
	storetest.Exec(t, st, `UPDATE user SET show_hosts = 0 WHERE id = ?`, p.bob)

	p.hostAlice = storetest.Host(t, st, storetest.HostOptions{User: p.alice, CreateTime: 5000, RPCTime: 6000,
		TotalCredit: 1000, ExpavgCredit: 10, ExpavgTime: 1700000002, Timezone: 3600,
		// What the scheduler stores for cpid "abc": printf '%s' abcalice@example.org | md5sum
		HostCPID: "f951e09dbeac53e031179a3e9246e23d", PNCPUs: 8,
		PVendor: "GenuineIntel", PModel: "Intel(R) Core(TM) i7 ® <fast>", PFpops: 4.5e9, PIops: 9e9, MNbytes: 16e9,
		MSwap: 2e9, DTotal: 5e11, DFree: 2.5e11, OSName: "Linux Debian", OSVersion: "6.1.0", AvgTurnaround: 3600.5}).ID
	storetest.Exec(t, st, `UPDATE host SET p_membw = 1.25e9, m_cache = 8388608, n_bwup = 1e6, n_bwdown = 5e6,
credit_per_cpu_sec = 0.0125 WHERE id = ?`, p.hostAlice)
	p.hostBob = storetest.Host(t, st, storetest.HostOptions{User: p.bob, CreateTime: 5001, TotalCredit: 10,
		HostCPID: "e1cd1977d75be8dbb12439fa4c4ca203", OSName: "Windows"}).ID // cpid "bobcpid"
	storetest.Host(t, st, storetest.HostOptions{User: p.alice, TotalCredit: 0, HostCPID: "nocredit"})
	storetest.Host(t, st, storetest.HostOptions{User: p.alice, TotalCredit: 5, DomainName: "deleted"})
	storetest.Host(t, st, storetest.HostOptions{User: 0, TotalCredit: 5})
	p.hostOrphan = storetest.Host(t, st, storetest.HostOptions{User: 987654, TotalCredit: 2, HostCPID: "orphan"}).ID
	return p
}

func insertTeam(t *testing.T, st *store.Store, founder int64, name string, credit, expavg float64) int64 {
	t.Helper()
	storetest.Exec(t, st, `INSERT INTO team (create_time, userid, name, name_lc, total_credit, expavg_credit, expavg_time)
VALUES (1, ?, ?, LOWER(?), ?, ?, 1700000003)`, founder, name, name, credit, expavg)
	var id int64
	if err := st.DB().QueryRowContext(context.Background(), `SELECT id FROM team WHERE name = ?`, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// readRecords parses file of dir strictly (parse_test.go).
func readRecords(t *testing.T, dir, file, root, item string, allowed []string) []record {
	t.Helper()
	doc, err := gunzip(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	recs, err := parseDump(doc, root, item, allowed)
	if err != nil {
		t.Fatalf("parse %s: %v\n%s", file, err, doc)
	}
	return recs
}

// ids returns each record's id, in file order.
func ids(t *testing.T, recs []record) []int64 {
	t.Helper()
	var out []int64
	for _, r := range recs {
		id, err := strconv.ParseInt(r.text["id"], 10, 64)
		if err != nil {
			t.Fatalf("record id %q: %v", r.text["id"], err)
		}
		out = append(out, id)
	}
	return out
}

// tablesDoc is tables.xml as the sites read it.
type tablesDoc struct {
	XMLName     xml.Name  `xml:"tables"`
	UpdateTime  int64     `xml:"update_time"`
	NUsers      int64     `xml:"nusers_total"`
	NTeams      int64     `xml:"nteams_total"`
	NHosts      int64     `xml:"nhosts_total"`
	TotalCredit string    `xml:"total_credit"`
	Apps        []string  `xml:"applications>application>name"`
	Badges      *struct{} `xml:"badges"`
}

func readTables(t *testing.T, dir string) tablesDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, TablesFile))
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	var v tablesDoc
	if err := d.Decode(&v); err != nil {
		t.Fatalf("parse tables.xml: %v\n%s", err, b)
	}
	// Every top-level element is one BOINC writes.
	var names struct {
		Any []struct{ XMLName xml.Name } `xml:",any"`
	}
	if err := xml.Unmarshal(b, &names); err != nil {
		t.Fatal(err)
	}
	for _, e := range names.Any {
		if !slices.Contains(tablesElems, e.XMLName.Local) {
			t.Errorf("tables.xml has <%s>, which BOINC's db_dump does not write", e.XMLName.Local)
		}
	}
	return v
}

func TestExportWritesBOINCsDump(t *testing.T) {
	t.Parallel()
	p := setup(t)
	dir := filepath.Join(t.TempDir(), "html", "stats")
	now := time.Unix(1700001234, 0)
	// A batch of 1 makes every table take several queries.
	res, err := Export(context.Background(), p.st, dir, 1, now)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if res.Users != 2 || res.Teams != 2 || res.Hosts != 3 {
		t.Errorf("Export wrote %d users, %d teams, %d hosts, want 2, 2, 3", res.Users, res.Teams, res.Hosts)
	}

	users := readRecords(t, dir, "user.gz", "users", "user", userElems)
	if got, want := ids(t, users), []int64{p.alice, p.bob}; !slices.Equal(got, want) {
		t.Fatalf("user.gz ids %v, want %v (by id; no user without credit, no deleted account)", got, want)
	}
	alice := users[0].text
	for k, want := range map[string]string{
		"name": "Alice José <& Co>", "create_time": "1000", "total_credit": "1234.500000",
		"expavg_credit": "12.250000", "expavg_time": "1700000000.500000",
		// printf '%s' cpid-alicealice@example.org | md5sum
		"cpid":    "8054b0e261a362b3910614957e515100",
		"country": "Germany", "url": "alice.example.org", "teamid": strconv.FormatInt(p.teamA, 10), "has_profile": "",
	} {
		if got, ok := alice[k]; !ok || got != want {
			t.Errorf("alice's <%s> = %q (present %v), want %q", k, got, ok, want)
		}
	}
	for _, absent := range []string{"teamid", "country", "url", "has_profile"} {
		if _, ok := users[1].text[absent]; ok {
			t.Errorf("bob's record has <%s>, which BOINC writes only when set", absent)
		}
	}
	if got := users[0].order; !slices.Equal(got, []string{"id", "name", "create_time", "total_credit", "expavg_credit",
		"expavg_time", "cpid", "country", "url", "teamid", "has_profile"}) {
		t.Errorf("alice's elements in order %v, want BOINC's", got)
	}

	teams := readRecords(t, dir, "team.gz", "teams", "team", teamElems)
	if got, want := ids(t, teams), []int64{p.teamA, p.teamOrphan}; !slices.Equal(got, want) {
		t.Fatalf("team.gz ids %v, want %v (no team without credit)", got, want)
	}
	for k, want := range map[string]string{
		"type": "4", "name": "Team A & friends", "userid": strconv.FormatInt(p.alice, 10),
		"total_credit": "1300.250000", "expavg_credit": "13.500000", "expavg_time": "1700000003.000000",
		"founder_name": "Alice José <& Co>", "create_time": "1500", "url": "https://a.example.org/?x=1&y=2",
		"name_html": "<b>A</b>", "description": "We crunch.", "country": "Germany",
	} {
		if got := teams[0].text[k]; got != want {
			t.Errorf("team A's <%s> = %q, want %q", k, got, want)
		}
	}
	if _, ok := teams[1].text["founder_name"]; ok {
		t.Errorf("the orphan team has a <founder_name>, but its founder's row is gone")
	}

	hosts := readRecords(t, dir, "host.gz", "hosts", "host", hostElems)
	if got, want := ids(t, hosts), []int64{p.hostAlice, p.hostBob, p.hostOrphan}; !slices.Equal(got, want) {
		t.Fatalf("host.gz ids %v, want %v (no host without credit, deleted, or of no user)", got, want)
	}
	for k, want := range map[string]string{
		"userid": strconv.FormatInt(p.alice, 10), "total_credit": "1000.000000", "expavg_credit": "10.000000",
		"expavg_time": "1700000002.000000", "p_vendor": "GenuineIntel", "p_model": "Intel(R) Core(TM) i7 ® <fast>",
		"os_name": "Linux Debian", "os_version": "6.1.0", "misc": "", "create_time": "5000", "rpc_time": "6000",
		"timezone": "3600", "ncpus": "8", "p_fpops": "4500000000.000000", "p_iops": "9000000000.000000",
		"p_membw": "1250000000.000000", "m_nbytes": "16000000000.000000", "m_cache": "8388608.000000",
		"m_swap": "2000000000.000000", "d_total": "500000000000.000000", "d_free": "250000000000.000000",
		"n_bwup": "1000000.000000", "n_bwdown": "5000000.000000", "avg_turnaround": "3600.500000",
		"credit_per_cpu_sec": "0.012500",
		"host_cpid": "f951e09dbeac53e031179a3e9246e23d",
	} {
		if got, ok := hosts[0].text[k]; !ok || got != want {
			t.Errorf("alice's host's <%s> = %q (present %v), want %q", k, got, ok, want)
		}
	}
	if got := len(hosts[0].order); got != len(hostElems) {
		t.Errorf("alice's host has %d elements, want all %d of BOINC's detail record", got, len(hostElems))
	}
	if _, ok := hosts[1].text["userid"]; ok {
		t.Errorf("bob's host has <userid>, but bob hides his computers")
	}
	if got, want := hosts[1].text["host_cpid"], "e1cd1977d75be8dbb12439fa4c4ca203"; got != want {
		t.Errorf("bob's host's <host_cpid> = %q, want %q", got, want)
	}
	if _, ok := hosts[2].text["userid"]; ok || hosts[2].text["host_cpid"] != "" {
		t.Errorf("the orphan host: userid present %v, host_cpid %q; want neither (its owner's row is gone)", ok, hosts[2].text["host_cpid"])
	}

	if recs := readRecords(t, dir, "user_deleted.gz", "users_deleted", "user", []string{"id", "cpid"}); len(recs) != 0 {
		t.Errorf("user_deleted.gz has %d records, want none", len(recs))
	}
	if recs := readRecords(t, dir, "host_deleted.gz", "hosts_deleted", "host", []string{"id", "host_cpid"}); len(recs) != 0 {
		t.Errorf("host_deleted.gz has %d records, want none", len(recs))
	}

	tables := readTables(t, dir)
	if tables.UpdateTime != now.Unix() || tables.NUsers != 2 || tables.NTeams != 2 || tables.NHosts != 3 ||
		tables.TotalCredit != "1244.500000" || tables.Badges == nil {
		t.Errorf("tables.xml = %+v, want update_time %d, 2 users, 2 teams, 3 hosts, total_credit 1244.500000, <badges>",
			tables, now.Unix())
	}
	if want := []string{"Simulation & <more>", "Old app"}; !slices.Equal(tables.Apps, want) {
		t.Errorf("tables.xml applications %q, want %q", tables.Apps, want)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".stats.new-*"))
	if len(left) != 0 {
		t.Errorf("temporary directories left beside the dump: %v", left)
	}
}

// TestUserFileIsByteForByteBOINCs checks the layout the sites' line
// scripts rely on, against a record written out by hand from db_dump.cpp.
func TestUserFileIsByteForByteBOINCs(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	id := storetest.User(t, st, storetest.UserOptions{Name: "Zoë", EmailAddr: "z@example.org", CreateTime: 7,
		TotalCredit: 2, ExpavgCredit: 0.5, ExpavgTime: 3, CrossProjectID: "abc"}).ID
	dir := filepath.Join(t.TempDir(), "stats")
	if _, err := Export(context.Background(), st, dir, 100, time.Unix(9, 0)); err != nil {
		t.Fatal(err)
	}
	got, err := gunzip(filepath.Join(dir, "user.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// printf '%s' abcz@example.org | md5sum
	want := "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<users>\n<user>\n <id>" + strconv.FormatInt(id, 10) + "</id>\n" +
		" <name>Zo&#195;&#171;</name>\n <create_time>7</create_time>\n <total_credit>2.000000</total_credit>\n" +
		" <expavg_credit>0.500000</expavg_credit>\n <expavg_time>3.000000</expavg_time>\n" +
		" <cpid>b5ae2f26b8fef4eada2524359a83b336</cpid>\n</user>\n</users>\n"
	if string(got) != want {
		t.Errorf("user.gz =\n%s\nwant\n%s", got, want)
	}
	tables, err := os.ReadFile(filepath.Join(dir, TablesFile))
	if err != nil {
		t.Fatal(err)
	}
	wantTables := "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<tables>\n    <update_time>9</update_time>\n" +
		"    <nusers_total>1</nusers_total>\n    <total_credit>2.000000</total_credit>\n" +
		"    <applications>\n    </applications>\n    <badges>\n    </badges>\n</tables>\n"
	if string(tables) != wantTables {
		t.Errorf("tables.xml =\n%s\nwant\n%s", tables, wantTables)
	}
}

// failingSource fails the host list after its first batch: an export that
// breaks half way through a file.
type failingSource struct {
	*store.Store
	calls int
}

var errInjected = errors.New("injected failure")

func (f *failingSource) StatsHostList(ctx context.Context, after int64, limit int) ([]row.StatsHost, error) {
	f.calls++
	if f.calls > 1 {
		return nil, errInjected
	}
	return f.Store.StatsHostList(ctx, after, limit)
}

// snapshot returns every file of dir with its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestFailedExportLeavesThePreviousDump(t *testing.T) {
	t.Parallel()
	p := setup(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "stats")
	ctx := context.Background()
	if _, err := Export(ctx, p.st, dir, 1, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	storetest.Exec(t, p.st, `UPDATE user SET total_credit = total_credit + 1 WHERE total_credit > 0`)

	_, err := Export(ctx, &failingSource{Store: p.st}, dir, 1, time.Unix(200, 0))
	if !errors.Is(err, errInjected) {
		t.Fatalf("Export with a failing host list = %v, want the injected error", err)
	}
	if after := snapshot(t, dir); !mapsEqual(before, after) {
		t.Errorf("a failed export changed the dump in place")
	}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if e.Name() != "stats" && e.Name() != ".stats.lock" {
			t.Errorf("a failed export left %s beside the dump", e.Name())
		}
	}

	// A process killed mid-export leaves its directory; the next export
	// deletes it and swaps in a complete dump.
	if err := os.MkdirAll(filepath.Join(parent, ".stats.new-123", "junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Export(ctx, p.st, dir, 1, time.Unix(300, 0)); err != nil {
		t.Fatal(err)
	}
	if tables := readTables(t, dir); tables.UpdateTime != 300 || tables.TotalCredit != "1246.500000" {
		t.Errorf("after the next export tables.xml = %+v, want update_time 300, total_credit 1246.500000", tables)
	}
	if _, err := os.Stat(filepath.Join(parent, ".stats.new-123")); !os.IsNotExist(err) {
		t.Errorf("the killed export's directory is still there (%v)", err)
	}
}

func TestSecondExportIsRefusedWhileOneRuns(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	unlock, err := lock(filepath.Join(parent, ".stats.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	// The store is never reached: the lock is taken first.
	_, err = Export(context.Background(), nil, filepath.Join(parent, "stats"), 10, time.Unix(1, 0))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("another export")) {
		t.Errorf("Export while another holds the lock = %v, want a refusal", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
