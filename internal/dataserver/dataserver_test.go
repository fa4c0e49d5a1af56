package dataserver

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/rsa"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testFanout = 1024

// uploadKey is generated once: key generation is the slow part of these
// tests.
var uploadKey = sync.OnceValues(keys.Generate)

type bundle struct {
	h        *Handler
	srv      *httptest.Server
	reg      *prometheus.Registry
	key      *rsa.PrivateKey
	root     string // parent of the two directories, to check nothing escapes
	download string
	upload   string
}

type option func(*Options)

func setup(t *testing.T, opts ...option) *bundle {
	t.Helper()
	key, err := uploadKey()
	if err != nil {
		t.Fatalf("keys.Generate() error %v", err)
	}
	root := t.TempDir()
	b := &bundle{reg: prometheus.NewRegistry(), key: key, root: root,
		download: filepath.Join(root, "download"), upload: filepath.Join(root, "upload")}
	o := Options{DownloadDir: b.download, UploadDir: b.upload, Fanout: testFanout,
		UploadKey: &key.PublicKey, Registerer: b.reg}
	for _, f := range opts {
		f(&o)
	}
	b.h, err = New(o)
	if err != nil {
		t.Fatalf("New() error %v", err)
	}
	b.srv = httptest.NewServer(b.h)
	t.Cleanup(func() {
		b.srv.Close()
		b.h.Close()
	})
	return b
}

// stage puts a file in the download directory at its fan-out path.
func (b *bundle) stage(t *testing.T, name string, data []byte) {
	t.Helper()
	p, err := fanout.Path(b.download, name, testFanout)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) get(t *testing.T, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the path exactly as written: no cleaning of "..".
	req.URL.Opaque = path
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s error %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", path, err)
	}
	return resp, body
}

// post sends an upload handler request and returns the parsed reply.
func (b *bundle) post(t *testing.T, body []byte) *protocol.UploadReply {
	t.Helper()
	resp, err := b.srv.Client().Post(b.srv.URL+UploadPath, "application/x-www-form-urlencoded", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s error %v", UploadPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s status %d, want 200 (the status goes in the body)", UploadPath, resp.StatusCode)
	}
	rep, err := protocol.ParseUploadReply(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: ParseUploadReply error %v", UploadPath, err)
	}
	return rep
}

// uploadBody builds a client's upload request: header, then data (which
// may be shorter than nbytes-offset, as when a connection drops).
func uploadBody(t testing.TB, name, sig string, maxNbytes, nbytes, offset int64, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	err := protocol.WriteUploadRequest(&b, &protocol.UploadRequest{CoreClientMajorVersion: 7, CoreClientMinorVersion: 20,
		CoreClientRelease: 5, FileUpload: true, Name: name, XMLSignature: sig, MaxNbytes: maxNbytes,
		HasMaxNbytes: maxNbytes >= 0, Nbytes: nbytes, MD5Cksum: "00", Offset: offset})
	if err != nil {
		t.Fatal(err)
	}
	b.Write(data)
	return b.Bytes()
}

func sizeQuery(t *testing.T, name string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := protocol.WriteUploadRequest(&b, &protocol.UploadRequest{GetFileSize: true, Name: name}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// cert is the <xml_signature> of an upload certificate for name that
// expires in an hour.
func (b *bundle) cert(t *testing.T, name string, maxNbytes int64) string {
	t.Helper()
	return b.certExpiring(t, name, maxNbytes, time.Now().Add(time.Hour).Unix())
}

func (b *bundle) certExpiring(t *testing.T, name string, maxNbytes, expires int64) string {
	t.Helper()
	sig, err := keys.Sign(b.key, []byte(keys.UploadCertificate(name, float64(maxNbytes), expires)))
	if err != nil {
		t.Fatal(err)
	}
	return keys.UploadSignature(sig, expires)
}

func (b *bundle) stored(t *testing.T, name string) ([]byte, bool) {
	t.Helper()
	p, err := fanout.Path(b.upload, name, testFanout)
	if err != nil {
		return nil, false
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	return data, true
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func TestDownloadRange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	data := payload(20000)
	b.stage(t, "input_1", data)
	path := DownloadPrefix + fanout.Dir("input_1", testFanout) + "/input_1"

	resp, body := b.get(t, path)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET %s = %d with %d bytes, want 200 with all %d", path, resp.StatusCode, len(body), len(data))
	}
	// The client resumes with "Range: bytes=N-" and appends what comes.
	resp, body = b.get(t, path, "Range", "bytes=5000-")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[5000:]) {
		t.Fatalf("GET %s Range bytes=5000- = %d with %d bytes, want 206 with the last 15000", path, resp.StatusCode, len(body))
	}
	if got := resp.Header.Get("Content-Range"); got != "bytes 5000-19999/20000" {
		t.Errorf("Content-Range = %q, want bytes 5000-19999/20000", got)
	}
	resp, _ = b.get(t, path, "Range", "bytes=20000-")
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("GET %s Range past the end = %d, want 416", path, resp.StatusCode)
	}
	if got := testutil.ToFloat64(b.h.metrics.downloads.WithLabelValues(dlOK)); got != 2 {
		t.Errorf("downloads_total{outcome=ok} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(b.h.metrics.downloadBytes); got != 35000 {
		t.Errorf("download_bytes_total = %v, want 35000", got)
	}
}

func TestDownloadRefusesOtherPaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stage(t, "input_1", []byte("secret-free data"))
	dir := fanout.Dir("input_1", testFanout)
	other := "0"
	if dir == "0" {
		other = "1"
	}
	// Things a client must never reach: a file outside, a directory.
	if err := os.WriteFile(filepath.Join(b.root, "outside"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	linkName := "escape"
	linkDir := filepath.Join(b.download, fanout.Dir(linkName, testFanout))
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(b.root, "outside"), filepath.Join(linkDir, linkName)); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		DownloadPrefix + "input_1",                                // no fan-out dir
		DownloadPrefix + other + "/input_1",                       // wrong fan-out dir
		DownloadPrefix + dir + "/",                                // no name
		DownloadPrefix + dir,                                      // the directory itself
		DownloadPrefix + dir + "/x/input_1",                       // too deep
		DownloadPrefix + dir + "/../" + dir + "/input_1",          // dot-dot
		DownloadPrefix + "../outside",                             // dot-dot out
		DownloadPrefix + "../../outside",                          // further out
		DownloadPrefix + dir + "/..%2F..%2Foutside",               // encoded slashes
		DownloadPrefix + "%2e%2e/outside",                         // encoded dots
		DownloadPrefix + fanout.Dir("..", testFanout) + "/..",     // ".." as a name
		DownloadPrefix + fanout.Dir("a%b", testFanout) + "/a%25b", // '%' in a name
		DownloadPrefix + fanout.Dir("missing", testFanout) + "/missing",
		DownloadPrefix + fanout.Dir(linkName, testFanout) + "/" + linkName, // symlink out
		"/downloads/" + dir + "/input_1",
		"/",
	} {
		resp, body := b.get(t, path)
		if resp.StatusCode < 400 || strings.Contains(string(body), "outside") || strings.Contains(string(body), "data") {
			t.Errorf("GET %s = %d %q, want a 4xx or 5xx with no file content", path, resp.StatusCode, body)
		}
	}
	resp, err := b.srv.Client().Post(b.srv.URL+DownloadPrefix+dir+"/input_1", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to a download = %d, want 405", resp.StatusCode)
	}
}

func TestUploadSmallFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_1_0_r0_0"
	data := []byte("HELLO BOINC WORLD\ndone\n")
	rep := b.post(t, uploadBody(t, name, b.cert(t, name, 100000), 100000, int64(len(data)), 0, data))
	if rep.Status != protocol.UploadOK {
		t.Fatalf("upload of %d bytes = %+v, want status 0", len(data), rep)
	}
	got, ok := b.stored(t, name)
	if !ok || !bytes.Equal(got, data) {
		t.Fatalf("stored file = %q (exists %v), want %q", got, ok, data)
	}
	// The reply was lost and the client tries again: still success, file unchanged.
	rep = b.post(t, uploadBody(t, name, b.cert(t, name, 100000), 100000, int64(len(data)), 0, bytes.ToUpper(data)))
	if got, _ := b.stored(t, name); rep.Status != protocol.UploadOK || !bytes.Equal(got, data) {
		t.Fatalf("second upload = %+v and file %q; want status 0 and the file unchanged", rep, got)
	}
	if got := testutil.ToFloat64(b.h.metrics.uploads.WithLabelValues(upOK)); got != 1 {
		t.Errorf("uploads_total{outcome=ok} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.h.metrics.uploads.WithLabelValues(upComplete)); got != 1 {
		t.Errorf("uploads_total{outcome=already_done} = %v, want 1", got)
	}
}

func TestUploadEmptyFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep := b.post(t, uploadBody(t, "empty_0", b.cert(t, "empty_0", 10), 10, 0, 0, nil))
	if got, ok := b.stored(t, "empty_0"); rep.Status != protocol.UploadOK || !ok || len(got) != 0 {
		t.Fatalf("upload of an empty file = %+v, stored %v %q; want status 0 and an empty file", rep, ok, got)
	}
}

// TestUploadResume follows exp12: a size query, an upload cut short, a
// size query that reports what arrived, and the rest from that offset.
func TestUploadResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_2_0_r0_0"
	data := payload(20005)
	n := int64(len(data))
	sig := b.cert(t, name, 100000)

	rep := b.post(t, sizeQuery(t, name))
	if rep.Status != protocol.UploadOK || !rep.HasFileSize || rep.FileSize != 0 {
		t.Fatalf("size query before any upload = %+v, want status 0, file_size 0", rep)
	}
	rep = b.post(t, uploadBody(t, name, sig, 100000, n, 0, data[:12000]))
	if rep.Status != protocol.UploadTransient {
		t.Fatalf("upload cut after 12000 of %d bytes = %+v, want transient status 1", n, rep)
	}
	rep = b.post(t, sizeQuery(t, name))
	if rep.Status != protocol.UploadOK || rep.FileSize != 12000 {
		t.Fatalf("size query after a partial upload = %+v, want file_size 12000", rep)
	}
	rep = b.post(t, uploadBody(t, name, sig, 100000, n, 12000, data[12000:]))
	if rep.Status != protocol.UploadOK {
		t.Fatalf("upload of the rest from offset 12000 = %+v, want status 0", rep)
	}
	got, _ := b.stored(t, name)
	if md5hex(got) != md5hex(data) {
		t.Fatalf("stored file has %d bytes, md5 %s; want %d bytes, md5 %s", len(got), md5hex(got), n, md5hex(data))
	}
	// Extra bytes after nbytes are never written.
	other := "wu_3_0_r0_0"
	rep = b.post(t, uploadBody(t, other, b.cert(t, other, 100), 100, 10, 0, payload(50)))
	if got, _ := b.stored(t, other); rep.Status != protocol.UploadOK || len(got) != 10 {
		t.Fatalf("upload of 10 bytes followed by 40 more = %+v, stored %d bytes; want status 0, 10 bytes", rep, len(got))
	}
	// An offset beyond what is stored is retried, not written.
	third := "wu_4_0_r0_0"
	rep = b.post(t, uploadBody(t, third, b.cert(t, third, 100), 100, 20, 10, payload(10)))
	if _, ok := b.stored(t, third); rep.Status != protocol.UploadTransient || ok && len(mustStored(t, b, third)) != 0 {
		t.Fatalf("upload from offset 10 of a file with 0 bytes stored = %+v, want transient and nothing written", rep)
	}
}

func mustStored(t *testing.T, b *bundle, name string) []byte {
	got, _ := b.stored(t, name)
	return got
}

func TestUploadRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	data := []byte("output")
	n := int64(len(data))
	name := "wu_5_0_r0_0"
	for _, tc := range []struct {
		what   string
		body   []byte
		status int
		stored string // file name that must not exist afterwards
	}{
		{"missing certificate", uploadBody(t, name, "", 100, n, 0, data), protocol.UploadPermanent, name},
		{"certificate for another file", uploadBody(t, name, b.cert(t, "wu_6_0_r0_0", 100), 100, n, 0, data), protocol.UploadPermanent, name},
		{"max_nbytes raised by the client", uploadBody(t, name, b.cert(t, name, 100), 1000, n, 0, data), protocol.UploadPermanent, name},
		{"missing max_nbytes", uploadBody(t, name, b.cert(t, name, 100), -1, n, 0, data), protocol.UploadPermanent, name},
		{"garbage certificate", uploadBody(t, name, "zz\n.", 100, n, 0, data), protocol.UploadPermanent, name},
		{"nbytes over max_nbytes", uploadBody(t, name, b.cert(t, name, 4), 4, n, 0, data), protocol.UploadPermanent, name},
		{"offset past nbytes", uploadBody(t, name, b.cert(t, name, 100), 100, n, n+1, nil), protocol.UploadPermanent, name},
		{"dot-dot name with a valid certificate", uploadBody(t, "../evil", b.cert(t, "../evil", 100), 100, n, 0, data), protocol.UploadPermanent, "evil"},
		{"dot-dot in the middle", uploadBody(t, "a..b", b.cert(t, "a..b", 100), 100, n, 0, data), protocol.UploadPermanent, "a..b"},
		{"slash in name", uploadBody(t, "x/y", b.cert(t, "x/y", 100), 100, n, 0, data), protocol.UploadPermanent, "y"},
		{"size query for a bad name", sizeQuery(t, "../../etc/passwd"), protocol.UploadPermanent, ""},
		{"not a request", []byte("hello"), protocol.UploadPermanent, ""},
		{"header too long", append([]byte("<data_server_request>\n"), bytes.Repeat([]byte("x"), 20000)...), protocol.UploadPermanent, ""},
	} {
		rep := b.post(t, tc.body)
		if rep.Status != tc.status || rep.Message == "" {
			t.Errorf("%s: reply %+v, want status %d with a message", tc.what, rep, tc.status)
		}
		if tc.stored != "" {
			if _, ok := b.stored(t, tc.stored); ok {
				t.Errorf("%s: file %s was written", tc.what, tc.stored)
			}
		}
	}
	checkContained(t, b)
	if got := testutil.ToFloat64(b.h.metrics.uploads.WithLabelValues(upBadCert)); got != 5 {
		t.Errorf("uploads_total{outcome=bad_cert} = %v, want 5", got)
	}
}

// checkContained fails if anything exists under the test root other than
// the two directories and files at fan-out paths inside them.
func checkContained(t *testing.T, b *bundle) {
	t.Helper()
	err := filepath.WalkDir(b.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(b.root, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		switch {
		case rel == "." || rel == "download" || rel == "upload" || rel == "outside":
		case len(parts) == 2 && d.IsDir():
		case len(parts) == 3 && !d.IsDir() && fanout.ValidName(parts[2]) == nil && parts[1] == fanout.Dir(parts[2], testFanout):
		default:
			t.Errorf("unexpected entry %s under the test root", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUploadSamples replays the real client's uploads (samples 07 and 16).
func TestUploadSamples(t *testing.T) {
	t.Parallel()
	withKey := setup(t)
	noKey := setup(t, func(o *Options) { o.UploadKey = nil })
	for _, tc := range []struct {
		file string
		b    *bundle
		want int
	}{
		// Signed with the reference server's key, not ours.
		{"07_upload_POST_small_file.http", withKey, protocol.UploadPermanent},
		{"16_upload_POST_without_xml_signature.http", withKey, protocol.UploadPermanent},
		{"07_upload_POST_small_file.http", noKey, protocol.UploadOK},
		{"16_upload_POST_without_xml_signature.http", noKey, protocol.UploadOK},
	} {
		rep := tc.b.post(t, httpBody(t, tc.file))
		if rep.Status != tc.want {
			t.Errorf("%s (key %v): reply %+v, want status %d", tc.file, !tc.b.h.certs.Empty(), rep, tc.want)
		}
	}
	got, _ := noKey.stored(t, "wu_upper_1_0_r0_out")
	if string(got) != "HELLO BOINC WORLD\ndone\n" || md5hex(got) != "cc4b471dacedcb39d73c6fa176272933" {
		t.Errorf("stored sample upload = %q, want the client's 23 bytes", got)
	}
	rep := noKey.post(t, httpBody(t, "12_upload_get_file_size_POST.http"))
	if rep.Status != protocol.UploadOK || rep.FileSize != 23 {
		t.Errorf("sample 12 size query = %+v, want file_size 23", rep)
	}
}

func TestUploadServerCap(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.UploadKey = nil; o.MaxFileBytes = 10 })
	rep := b.post(t, uploadBody(t, "big_0", "", 1000, 11, 0, payload(11)))
	if _, ok := b.stored(t, "big_0"); rep.Status != protocol.UploadPermanent || ok {
		t.Fatalf("upload of 11 bytes with a 10-byte server cap = %+v (stored %v), want status -1, nothing stored", rep, ok)
	}
}

// TestUploadDiskError: a failure to write is transient, so the client keeps
// its file and tries again.
func TestUploadDiskError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_7_0_r0_0"
	// A plain file where the fan-out directory should be.
	if err := os.WriteFile(filepath.Join(b.upload, fanout.Dir(name, testFanout)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := b.post(t, uploadBody(t, name, b.cert(t, name, 100), 100, 3, 0, []byte("abc")))
	if rep.Status != protocol.UploadTransient {
		t.Fatalf("upload with an unusable directory = %+v, want transient status 1", rep)
	}
	if got := testutil.ToFloat64(b.h.metrics.uploads.WithLabelValues(upServerError)); got != 1 {
		t.Errorf("uploads_total{outcome=server_error} = %v, want 1", got)
	}
}

func TestUploadBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_8_0_r0_0"
	p, _ := fanout.Path(b.upload, name, testFanout)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	rep := b.post(t, uploadBody(t, name, b.cert(t, name, 100), 100, 3, 0, []byte("abc")))
	if rep.Status != protocol.UploadTransient {
		t.Fatalf("upload of a file locked by another writer = %+v, want transient status 1", rep)
	}
}

func TestUploadMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, _ := b.get(t, UploadPath)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET %s = %d, want 405", UploadPath, resp.StatusCode)
	}
}

func TestNewRegistersMetricsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := New(Options{DownloadDir: b.download, UploadDir: b.upload, Registerer: b.reg})
	if err == nil {
		t.Fatal("second New() on the same registry = nil error, want a duplicate registration error")
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New(no directories) = nil error, want an error")
	}
}

func httpBody(tb testing.TB, name string) []byte {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("../protocol/testdata/samples", name))
	if err != nil {
		tb.Skipf("protocol sample not available: %v", err)
	}
	i := bytes.Index(raw, []byte("\n\n"))
	if i < 0 {
		tb.Fatalf("sample %s has no blank line after the headers", name)
	}
	return raw[i+2:]
}

// FuzzUploadHandler throws arbitrary bodies at the upload handler (with
// certificates off, so bodies reach the file-writing code) and checks that
// the reply is always a valid status and nothing lands outside the
// fan-out layout or past the size cap.
func FuzzUploadHandler(f *testing.F) {
	for _, name := range []string{
		"07_upload_POST_small_file.http",
		"12_upload_get_file_size_POST.http",
		"14_upload_POST_large_file_HEAD_ONLY.http",
		"16_upload_POST_without_xml_signature.http",
	} {
		f.Add(httpBody(f, name))
	}
	// Hostile seeds, so that the seed corpus make test runs checks the
	// limits: a file over the server's cap, names that leave the fan-out.
	f.Add(uploadBody(f, "wu_big_r0_0", "", -1, 5000, 0, payload(5000)))
	for _, name := range []string{"../outside", "x/../../outside", "/tmp/outside", ".", "a\\..\\b"} {
		f.Add(uploadBody(f, name, "", -1, 3, 0, []byte("abc")))
	}
	root := f.TempDir()
	h, err := New(Options{DownloadDir: filepath.Join(root, "download"), UploadDir: filepath.Join(root, "upload"),
		Fanout: testFanout, MaxFileBytes: 4096, MaxHeaderBytes: 2048})
	if err != nil {
		f.Fatal(err)
	}
	defer h.Close()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, UploadPath, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("POST %q = HTTP %d, want 200", body, rec.Code)
		}
		rep, err := protocol.ParseUploadReply(bufio.NewReader(rec.Body))
		if err != nil || rep.Status < -1 || rep.Status > 1 {
			t.Fatalf("POST %q: reply %+v, %v; want status -1, 0 or 1", body, rep, err)
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			parts := strings.Split(filepath.ToSlash(rel), "/")
			switch {
			case rel == "." || rel == "download" || rel == "upload":
			case len(parts) == 2 && parts[0] == "upload" && d.IsDir():
			case len(parts) == 3 && parts[0] == "upload" && !d.IsDir() &&
				fanout.ValidName(parts[2]) == nil && parts[1] == fanout.Dir(parts[2], testFanout):
				st, err := d.Info()
				if err != nil {
					return err
				}
				if st.Size() > 4096 {
					return fmt.Errorf("file %s has %d bytes, cap 4096", rel, st.Size())
				}
			default:
				return fmt.Errorf("unexpected entry %s", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after POST %q: %v", body, err)
		}
	})
}
