package scheduler

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

const (
	sharedDB = "sf_db_eae797ff01dd963522f1b6a54ac3242a"
	md5A     = "eae797ff01dd963522f1b6a54ac3242a"
	md5B     = "cc4b471dacedcb39d73c6fa176272933"
)

// threeInputs is a job's document with one input on another server, one
// with a gzip'd copy staged and one shared sticky file.
func threeInputs(t *testing.T, name string) string {
	t.Helper()
	doc, err := jobxml.FormatWorkunit(jobxml.Workunit{CommandLine: "--rounds 3 --db db", Inputs: []jobxml.InputFile{
		{Name: name + "_remote", OpenName: "remote", Nbytes: 1 << 20, MD5: md5A,
			URLs: []string{"http://data.example.org/files/r1", "http://mirror.example.org/r1"}},
		{Name: name + "_params", OpenName: "params", Nbytes: 4096, MD5: md5B, GzippedNbytes: 60, CopyFile: true},
		{Name: sharedDB, OpenName: "db", Nbytes: 1e6, MD5: md5A, Sticky: true, NoDelete: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// twoOutputs are an instance's outputs: a result and an optional log, each
// with its own size limit.
func twoOutputs(rname string) []jobxml.OutputFile {
	return []jobxml.OutputFile{
		{Name: jobxml.OutputName(rname, 0), OpenName: "result", MaxNbytes: 1e5},
		{Name: jobxml.OutputName(rname, 1), OpenName: "log", MaxNbytes: 3e5, Optional: true},
	}
}

// downloadURLs is the list a 7.20 client downloads an input from, as
// FILE_INFO::parse (client/client_types.cpp) leaves it: any <gzipped_url>s
// replace the <url>s and make the download gzip'd.
func downloadURLs(fi protocol.FileInfo) (urls []string, gzipped bool) {
	if len(fi.GzippedURLs) > 0 {
		return fi.GzippedURLs, true
	}
	return fi.URLs, false
}

// TestReplyDescribesJobFiles: a job with three inputs (on another server,
// gzip'd, sticky), a command line, two outputs (one optional) and an app
// version with a cmdline is described as the 7.20 client reads it: each
// input from where it is with its uncompressed size and md5, the gzip'd
// one from NAME.gz in NAME's fan-out directory, the sticky one marked;
// open names and copy_file on the workunit's file_refs; each output with
// its own size limit and certificate and optional where set.
func TestReplyDescribesJobFiles(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc, err := appversion.Format(appversion.Version{Cmdline: "--mode fast"})
	if err != nil {
		t.Fatal(err)
	}
	f.setVersionDoc(doc)
	f.addJob("wu3", job{xmlDoc: threeInputs(t, "wu3"), outputs: twoOutputs})

	code, body := f.post(request{auth: f.user.Authenticator, workSecs: 1000, instances: 1}.body())
	if code != http.StatusOK {
		t.Fatalf("POST /scheduler = %d %q", code, body)
	}
	// The element names the client's parsers match (FILE_INFO::parse,
	// FILE_REF::parse, APP_VERSION::parse), in the text itself.
	for _, want := range []string{"<gzipped_url>", "<gzipped_nbytes>60</gzipped_nbytes>", "<sticky/>",
		"<optional/>", "<cmdline>--mode fast</cmdline>", "<command_line>--rounds 3 --db db</command_line>"} {
		if !strings.Contains(body, want) {
			t.Errorf("reply lacks %s:\n%s", want, body)
		}
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Workunits) != 1 || len(rep.Results) != 1 || len(rep.AppVersions) != 1 {
		t.Fatalf("reply: %d workunits, %d results, %d app versions; want 1 each (%s)",
			len(rep.Workunits), len(rep.Results), len(rep.AppVersions), messages(rep))
	}
	if got := rep.AppVersions[0].Cmdline; got != "--mode fast" {
		t.Errorf("app_version cmdline = %q, want the version's %q", got, "--mode fast")
	}
	wu, res := rep.Workunits[0], rep.Results[0]
	if wu.CommandLine != "--rounds 3 --db db" {
		t.Errorf("workunit command_line = %q, want the job's", wu.CommandLine)
	}
	infos := map[string]protocol.FileInfo{}
	for _, fi := range rep.FileInfos {
		if _, dup := infos[fi.Name]; dup {
			t.Errorf("file_info %s sent twice", fi.Name)
		}
		infos[fi.Name] = fi
	}
	projectURL := func(name string) string {
		rel, err := fanout.Rel(name, 16)
		if err != nil {
			t.Fatal(err)
		}
		return "http://127.0.0.1:8080/download/" + rel
	}

	// Inputs, as the client will fetch and check them.
	type input struct {
		urls         []string
		gzipped      bool
		nbytes, gzN  float64
		md5          string
		sticky       bool
		open         string
		copyFile     bool
		fileRefIndex int
		wantNoDelete bool
	}
	wantIn := map[string]input{
		"wu3_remote": {urls: []string{"http://data.example.org/files/r1", "http://mirror.example.org/r1"}, nbytes: 1 << 20, md5: md5A,
			open: "remote", fileRefIndex: 0},
		// NAME.gz beside NAME: the URL of NAME with ".gz".
		"wu3_params": {urls: []string{projectURL("wu3_params") + ".gz"}, gzipped: true, nbytes: 4096, gzN: 60, md5: md5B,
			open: "params", copyFile: true, fileRefIndex: 1},
		sharedDB: {urls: []string{projectURL(sharedDB)}, nbytes: 1e6, md5: md5A, sticky: true, open: "db", fileRefIndex: 2,
			wantNoDelete: true},
	}
	if len(wu.FileRefs) != len(wantIn) {
		t.Fatalf("workunit file_refs = %+v, want %d", wu.FileRefs, len(wantIn))
	}
	for name, w := range wantIn {
		fi, ok := infos[name]
		if !ok {
			t.Errorf("no file_info for input %s", name)
			continue
		}
		urls, gz := downloadURLs(fi)
		if !reflect.DeepEqual(urls, w.urls) || gz != w.gzipped {
			t.Errorf("input %s: the client downloads from %v (gzip'd %v), want %v (%v)", name, urls, gz, w.urls, w.gzipped)
		}
		if w.gzipped && !reflect.DeepEqual(fi.URLs, []string{projectURL(name)}) {
			t.Errorf("input %s: <url> %v, want the file itself for clients without gzip", name, fi.URLs)
		}
		if fi.Nbytes != w.nbytes || fi.MD5Cksum != w.md5 || fi.GzippedNbytes != w.gzN {
			t.Errorf("input %s: nbytes %v md5 %s gzipped_nbytes %v; want %v %s %v (size and md5 of the file uncompressed)",
				name, fi.Nbytes, fi.MD5Cksum, fi.GzippedNbytes, w.nbytes, w.md5, w.gzN)
		}
		if (fi.Sticky != nil) != w.sticky || (fi.NoDelete != nil) != w.wantNoDelete || fi.MaxNbytes != 0 || fi.XMLSignature != "" {
			t.Errorf("input %s = %+v: sticky %v no_delete %v wanted, and nothing of an output", name, fi, w.sticky, w.wantNoDelete)
		}
		ref := wu.FileRefs[w.fileRefIndex]
		if ref.FileName != name || ref.OpenName != w.open || (ref.CopyFile != nil) != w.copyFile || ref.MainProgram != nil || ref.Optional != nil {
			t.Errorf("workunit file_ref %d = %+v, want %s opened as %s, copy_file %v", w.fileRefIndex, ref, name, w.open, w.copyFile)
		}
	}

	// Outputs: each its own limit and certificate, optional where set.
	outs := twoOutputs(res.Name)
	if len(res.FileRefs) != len(outs) {
		t.Fatalf("result file_refs = %+v, want %d", res.FileRefs, len(outs))
	}
	verifier := keys.UploadVerifier{RSA: &f.key.PublicKey}
	for i, o := range outs {
		ref := res.FileRefs[i]
		if ref.FileName != o.Name || ref.OpenName != o.OpenName || (ref.Optional != nil) != o.Optional || ref.CopyFile != nil {
			t.Errorf("result file_ref %d = %+v, want %s opened as %s, optional %v", i, ref, o.Name, o.OpenName, o.Optional)
		}
		fi, ok := infos[o.Name]
		if !ok {
			t.Errorf("no file_info for output %s", o.Name)
			continue
		}
		if fi.MaxNbytes != o.MaxNbytes || len(fi.URLs) != 1 || !strings.Contains(fi.URLs[0], "file_upload_handler") ||
			fi.Sticky != nil || len(fi.GzippedURLs) != 0 {
			t.Errorf("output %s = %+v, want max_nbytes %v and the upload URL", o.Name, fi, o.MaxNbytes)
		}
		exp, err := keys.UploadExpiry(fi.XMLSignature)
		if err != nil {
			t.Fatalf("output %s certificate: %v", o.Name, err)
		}
		if err := verifier.Verify([]byte(keys.UploadCertificate(o.Name, o.MaxNbytes, exp)), fi.XMLSignature); err != nil {
			t.Errorf("output %s: its certificate does not verify for its own name and size limit: %v", o.Name, err)
		}
	}
}

// TestStickyFileHeldIsNotResent: a sticky file the host lists as present
// gets no <file_info> (the client links the job's <file_ref> to the one it
// holds, by name), while the job still names it; one listed but not yet
// present is described again (the client merges it into the one it has).
// Two jobs sharing it in one reply describe it once.
func TestStickyFileHeldIsNotResent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("wa", job{xmlDoc: threeInputs(t, "wa")})
	f.addJob("wb", job{xmlDoc: threeInputs(t, "wb")})
	rep := f.rpc(request{workSecs: 1000, instances: 2})
	if len(rep.Workunits) != 2 {
		t.Fatalf("first reply: %d workunits, want 2 (%s)", len(rep.Workunits), messages(rep))
	}
	if n := countInfos(rep, sharedDB); n != 1 {
		t.Errorf("first reply, two jobs sharing %s: %d file_infos for it, want 1", sharedDB, n)
	}

	for _, tc := range []struct {
		status int
		want   int
	}{{protocol.FilePresent, 0}, {0, 1}} {
		name := "wc" + string(rune('0'+tc.want))
		f.addJob(name, job{xmlDoc: threeInputs(t, name)})
		rep := f.rpc(request{workSecs: 1000, instances: 1,
			hostFiles: []protocol.HostFile{{Name: sharedDB, Nbytes: 1e6, Status: tc.status}, {Name: "sf_other", Nbytes: 5, Status: 1}}})
		if len(rep.Workunits) != 1 {
			t.Fatalf("host listing %s with status %d: %d workunits, want 1 (%s)", sharedDB, tc.status, len(rep.Workunits), messages(rep))
		}
		if n := countInfos(rep, sharedDB); n != tc.want {
			t.Errorf("host listing %s with status %d: %d file_infos for it, want %d", sharedDB, tc.status, n, tc.want)
		}
		if countInfos(rep, name+"_params") != 1 || countInfos(rep, name+"_remote") != 1 {
			t.Errorf("host listing %s: the job's other inputs are not described: %+v", sharedDB, rep.FileInfos)
		}
		named := false
		for _, ref := range rep.Workunits[0].FileRefs {
			named = named || ref.FileName == sharedDB
		}
		if !named {
			t.Errorf("host listing %s with status %d: the workunit no longer names it: %+v", sharedDB, tc.status, rep.Workunits[0].FileRefs)
		}
	}
}

func countInfos(rep *protocol.SchedulerReply, name string) int {
	n := 0
	for _, fi := range rep.FileInfos {
		if fi.Name == name {
			n++
		}
	}
	return n
}

// TestStickyFileNotCountedTwice: a job's disk bound includes its inputs,
// and a sticky input the host holds is already out of its free disk: the
// job needs only the rest. One too big for the free disk with the sticky
// file counted is sent when the host holds the file, and two jobs sharing
// a sticky file not yet there count it once.
func TestStickyFileNotCountedTwice(t *testing.T) {
	t.Parallel()
	const bound = 1.5e6 // the sticky input is 1e6 of it
	other := protocol.HostFile{Name: "sf_other", Nbytes: 5, Status: protocol.FilePresent}
	for _, tc := range []struct {
		name  string
		jobs  int
		free  float64
		files []protocol.HostFile
		want  int
	}{
		{"not held, too big", 1, 1e6, nil, 0},
		{"held", 1, 1e6, []protocol.HostFile{{Name: sharedDB, Nbytes: 1e6, Status: protocol.FilePresent}}, 1},
		{"held but not yet present", 1, 1e6, []protocol.HostFile{{Name: sharedDB, Nbytes: 1e6, Status: 0}}, 0},
		{"two jobs in one reply", 2, 2.2e6, []protocol.HostFile{other}, 2},
		{"two jobs, no list of held files: counted whole", 2, 2.2e6, nil, 1},
	} {
		f := setup(t)
		for i := range tc.jobs {
			name := "wd" + string(rune('a'+i))
			f.addJob(name, job{xmlDoc: threeInputs(t, name), disk: bound})
		}
		rep := f.rpc(request{workSecs: 1000, instances: float64(tc.jobs), ncpus: 2, diskFree: tc.free, hostFiles: tc.files})
		if len(rep.Results) != tc.want {
			t.Errorf("%s: %d tasks sent with %v bytes free, want %d (%s)", tc.name, len(rep.Results), tc.free, tc.want, messages(rep))
		}
	}
}
