package scheduler

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/dataserver"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// uploadFixture is a scheduler and the data server beside it, sharing the
// upload directory, as cmd/scheduler runs them.
type uploadFixture struct {
	*fixture
	uploads string
	ds      *dataserver.Handler
}

func setupUploads(t *testing.T) *uploadFixture {
	t.Helper()
	uploads := t.TempDir()
	f := setup(t, func(o *Options) { o.UploadDir = uploads })
	ds, err := dataserver.New(dataserver.Options{DownloadDir: t.TempDir(), UploadDir: uploads, Fanout: 16,
		UploadKey: &f.key.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	return &uploadFixture{fixture: f, uploads: uploads, ds: ds}
}

// send gives one job to a new host and returns the host, the result's id
// and name, and its output's file_info with the upload certificate.
func (u *uploadFixture) send(wuName string) (host, resultID int64, out protocol.FileInfo) {
	u.t.Helper()
	_, ids := u.addJob(wuName, job{})
	rep := u.rpc(request{workSecs: 1e4, instances: 1})
	if len(rep.Results) != 1 {
		u.t.Fatalf("sending %s: got %v (%q)", wuName, resultNames(rep), messages(rep))
	}
	for _, fi := range rep.FileInfos {
		if fi.Name == rep.Results[0].Name+"_0" {
			return rep.HostID, ids[0], fi
		}
	}
	u.t.Fatalf("reply has no output file_info: %+v", rep.FileInfos)
	return 0, 0, protocol.FileInfo{}
}

// upload sends data as the bytes from offset of a file declared nbytes
// long, with the certificate the scheduler sent.
func (u *uploadFixture) upload(out protocol.FileInfo, nbytes, offset int64, data []byte) *protocol.UploadReply {
	u.t.Helper()
	var b bytes.Buffer
	if err := protocol.WriteUploadRequest(&b, &protocol.UploadRequest{CoreClientMajorVersion: 7, CoreClientMinorVersion: 20,
		FileUpload: true, Name: out.Name, XMLSignature: out.XMLSignature, MaxNbytes: int64(out.MaxNbytes), HasMaxNbytes: true,
		Nbytes: nbytes, MD5Cksum: "00", Offset: offset}); err != nil {
		u.t.Fatal(err)
	}
	b.Write(data)
	w := httptest.NewRecorder()
	u.ds.ServeHTTP(w, httptest.NewRequest("POST", dataserver.UploadPath, &b))
	rep, err := protocol.ParseUploadReply(w.Body)
	if err != nil {
		u.t.Fatal(err)
	}
	return rep
}

func (u *uploadFixture) stored(name string) []byte {
	u.t.Helper()
	p, err := fanout.Path(u.uploads, name, 16)
	if err != nil {
		u.t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	return b
}

// reportSuccess reports the result as the client does, its output of
// nbytes bytes.
func (u *uploadFixture) reportSuccess(host int64, name string, nbytes int) {
	u.t.Helper()
	report := strings.Replace(successReport(name), "<nbytes>23.000000</nbytes>",
		"<nbytes>"+strconv.Itoa(nbytes)+".000000</nbytes>", 1)
	if rep := u.rpc(request{hostID: host, results: []string{report}}); !acked(rep, name) {
		u.t.Fatalf("report of %s not acked: %+v", name, rep.ResultAcks)
	}
}

// TestUnfinishedOutputNeverCounts is the attack of issue 16 up to the
// report: 17 bytes of an output declared 100,000 bytes long, reported as
// a success of 17 bytes. The output was never finished, so the instance is
// what a missing output makes it (a client error), and from the report on
// no upload with its certificate writes to the file, at any offset.
func TestUnfinishedOutputNeverCounts(t *testing.T) {
	t.Parallel()
	u := setupUploads(t)
	host, id, out := u.send("wu_attack_1")
	declared := int64(out.MaxNbytes)
	first := []byte("seventeen bytes!!")
	if rep := u.upload(out, declared, 0, first); rep.Status != protocol.UploadTransient {
		t.Fatalf("17 bytes of %d = %+v, want transient", declared, rep)
	}
	u.reportSuccess(host, strings.TrimSuffix(out.Name, "_0"), len(first))
	if r := u.result(id); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeClientError {
		t.Fatalf("result after reporting an unfinished output: state %s, outcome %s; want OVER, CLIENT_ERROR",
			r.ServerState, r.Outcome)
	}
	for _, off := range []int64{0, 5, 17} {
		rep := u.upload(out, declared, off, bytes.Repeat([]byte("X"), int(declared-off)))
		if rep.Status == protocol.UploadOK {
			t.Errorf("upload at offset %d after the report = %+v, want refused", off, rep)
		}
	}
	if got := u.stored(out.Name); !bytes.Equal(got, first) {
		t.Fatalf("output after the uploads that followed the report = %q, want the 17 bytes untouched", got)
	}
}

// TestAssimilatedOutputCannotChange: a finished output, reported,
// validated (its job's canonical instance) and published by the copy
// assimilation handler, is not changed by any upload with its certificate,
// at any offset or size, neither in the upload directory nor in the
// results; nor after the file deleter removed it from the upload
// directory.
func TestAssimilatedOutputCannotChange(t *testing.T) {
	t.Parallel()
	u := setupUploads(t)
	host, id, out := u.send("wu_honest_1")
	data := []byte("HELLO BOINC WORLD\ndone\n")
	n := int64(len(data))
	if rep := u.upload(out, n, 0, data); rep.Status != protocol.UploadOK {
		t.Fatalf("upload = %+v, want status 0", rep)
	}
	u.reportSuccess(host, strings.TrimSuffix(out.Name, "_0"), len(data))
	r := u.result(id)
	if r.Outcome != state.OutcomeSuccess {
		t.Fatalf("result outcome %s, want SUCCESS", r.Outcome)
	}
	results := filepath.Join(t.TempDir(), "results")
	h := &assimilator.FileHandler{Dir: results, UploadDir: u.uploads, Fanout: 16}
	wu := u.workunit(r.WorkunitID)
	if err := h.Handle(context.Background(), wu, &r); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	published := filepath.Join(results, wu.Name, "out")
	check := func(when string) {
		t.Helper()
		if got, err := os.ReadFile(published); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: published output = %q, %v; want %q", when, got, err, data)
		}
	}
	check("after assimilation")
	evil := bytes.Repeat([]byte("X"), int(out.MaxNbytes))
	for _, tc := range []struct{ nbytes, offset int64 }{{n, 0}, {n, 5}, {n + 10, n}, {n + 10, 0}, {int64(out.MaxNbytes), 0}} {
		rep := u.upload(out, tc.nbytes, tc.offset, evil[:tc.nbytes-tc.offset])
		if rep.Status != protocol.UploadPermanent && !(rep.Status == protocol.UploadOK && tc.nbytes == n) {
			t.Errorf("upload of nbytes %d at offset %d = %+v; want refused (or acknowledged without writing)",
				tc.nbytes, tc.offset, rep)
		}
	}
	if got := u.stored(out.Name); !bytes.Equal(got, data) {
		t.Fatalf("uploaded output after the rewrites = %q, want %q", got, data)
	}
	check("after uploads with the certificate")
	// The file deleter removes the upload; an upload with the certificate
	// before it expires makes a new file that nothing counts, and the
	// published output keeps its bytes.
	p, _ := fanout.Path(u.uploads, out.Name, 16)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	u.upload(out, n, 0, evil[:n])
	check("after an upload once the file was deleted")
}
