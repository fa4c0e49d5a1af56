package dataserver

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/protocol"
)

// tree is every entry under a directory: its mode and, for files, its
// content, to show that a refused request touched nothing.
type tree map[string]string

func snapshot(t *testing.T, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		v := st.Mode().String()
		if st.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (a tree) diff(b tree) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, "removed "+k)
		} else if v != w {
			out = append(out, "changed "+k+": "+v+" -> "+w)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	return out
}

// TestUploadRewriteOfCompletedFileRefused: once an upload was answered
// with success, no request, however well signed, changes the file, nor
// its hard link in the assimilated results.
func TestUploadRewriteOfCompletedFileRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_7_0_r0_0"
	data := []byte("0123456789")
	sig := b.cert(t, name, 100)
	if rep := b.post(t, uploadBody(t, name, sig, 100, 10, 0, data)); rep.Status != protocol.UploadOK {
		t.Fatalf("first upload = %+v, want status 0", rep)
	}
	p, _ := fanout.Path(b.upload, name, testFanout)
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != outputfile.FinishedMode {
		t.Fatalf("completed upload: stat %v, %v; want mode %v", st, err, outputfile.FinishedMode)
	}
	// The assimilator hard-links finished outputs into results/.
	results := filepath.Join(b.root, "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, filepath.Join(results, name)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, b.root)
	evil := bytes.Repeat([]byte("X"), 100)
	for _, tc := range []struct {
		what           string
		nbytes, offset int64
	}{
		{"larger nbytes from offset 0", 20, 0},
		{"larger nbytes from the middle", 20, 5},
		{"append at the end", 20, 10},
		{"up to max_nbytes", 100, 0},
	} {
		rep := b.post(t, uploadBody(t, name, sig, 100, tc.nbytes, tc.offset, evil[:tc.nbytes-tc.offset]))
		if rep.Status != protocol.UploadPermanent || !strings.Contains(rep.Message, "already uploaded") {
			t.Errorf("%s: reply %+v, want permanent status -1 saying the file is already uploaded", tc.what, rep)
		}
	}
	// A retry of the request that completed it (its reply was lost) and a
	// size query still succeed, and change nothing either.
	if rep := b.post(t, uploadBody(t, name, sig, 100, 10, 0, evil[:10])); rep.Status != protocol.UploadOK {
		t.Errorf("retry of the completing request = %+v, want status 0", rep)
	}
	if rep := b.post(t, sizeQuery(t, name)); rep.Status != protocol.UploadOK || rep.FileSize != 10 {
		t.Errorf("size query = %+v, want file_size 10", rep)
	}
	if d := before.diff(snapshot(t, b.root)); len(d) != 0 {
		t.Fatalf("refused rewrites changed files: %v", d)
	}
	if got := testutil.ToFloat64(b.h.metrics.uploads.WithLabelValues(upRewrite)); got != 4 {
		t.Errorf("uploads_total{outcome=rewrite} = %v, want 4", got)
	}
}

// TestUploadUnmarkedCompleteFileIsMarked: a file that reached its size but
// was never marked (the server stopped in between, or it predates the
// mark) is marked by the next request for it, and cannot grow after that.
func TestUploadUnmarkedCompleteFileIsMarked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_8_0_r0_0"
	p, _ := fanout.Path(b.upload, name, testFanout)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("abcdef"), outputfile.WritingMode); err != nil {
		t.Fatal(err)
	}
	sig := b.cert(t, name, 100)
	if rep := b.post(t, uploadBody(t, name, sig, 100, 6, 0, []byte("zzzzzz"))); rep.Status != protocol.UploadOK {
		t.Fatalf("retry for an unmarked complete file = %+v, want status 0", rep)
	}
	if rep := b.post(t, uploadBody(t, name, sig, 100, 12, 6, []byte("ghijkl"))); rep.Status != protocol.UploadPermanent {
		t.Fatalf("growing the file after it was marked = %+v, want status -1", rep)
	}
	if got, _ := b.stored(t, name); string(got) != "abcdef" {
		t.Fatalf("file = %q, want %q untouched", got, "abcdef")
	}
}

// TestUploadHostileNamesAndHeaders: names that try to leave the upload
// directory (relative, absolute, through a planted symbolic link) and
// headers built to exhaust the parser are refused with a BOINC error
// reply, and nothing on disk changes, inside or outside the directory.
func TestUploadHostileNamesAndHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outside := filepath.Join(b.root, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Fan-out escape: the directory a name hashes to is a link out of the
	// upload directory, and a file name is a link to a file outside.
	viaDir := "wu_9_0_r0_0"
	if err := os.MkdirAll(b.upload, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(b.upload, fanout.Dir(viaDir, testFanout))); err != nil {
		t.Fatal(err)
	}
	viaFile := "victim"
	linkDir := filepath.Join(b.upload, fanout.Dir(viaFile, testFanout))
	if fanout.Dir(viaFile, testFanout) == fanout.Dir(viaDir, testFanout) {
		t.Fatal("test names share a fan-out directory; pick others")
	}
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(linkDir, viaFile)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, b.root)
	data := []byte("pwned")
	n := int64(len(data))
	deep := "<data_server_request>\n" + strings.Repeat("<a>", 200) + "\n<data>\n"
	for _, tc := range []struct {
		what   string
		body   []byte
		status int
	}{
		{"absolute path", uploadBody(t, "/etc/passwd", b.cert(t, "/etc/passwd", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"absolute path to the outside directory", uploadBody(t, outside+"/victim", b.cert(t, outside+"/victim", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"dot-dot", uploadBody(t, "..", b.cert(t, "..", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"dot", uploadBody(t, ".", b.cert(t, ".", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"backslash dot-dot", uploadBody(t, `..\outside\victim`, b.cert(t, `..\outside\victim`, 100), 100, n, 0, data), protocol.UploadPermanent},
		{"percent-encoded dot-dot", uploadBody(t, "%2e%2e%2fvictim", b.cert(t, "%2e%2e%2fvictim", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"control character", uploadBody(t, "a\x01b", b.cert(t, "a\x01b", 100), 100, n, 0, data), protocol.UploadPermanent},
		{"fan-out directory linked outside", uploadBody(t, viaDir, b.cert(t, viaDir, 100), 100, n, 0, data), protocol.UploadTransient},
		{"file linked outside", uploadBody(t, viaFile, b.cert(t, viaFile, 100), 100, n, 0, data), protocol.UploadTransient},
		{"deeply nested header", []byte(deep), protocol.UploadPermanent},
		{"size query of an absolute path", sizeQuery(t, "/etc/passwd"), protocol.UploadPermanent},
	} {
		rep := b.post(t, tc.body)
		if rep.Status != tc.status || rep.Message == "" {
			t.Errorf("%s: reply %+v, want status %d with a message", tc.what, rep, tc.status)
		}
	}
	if d := before.diff(snapshot(t, b.root)); len(d) != 0 {
		t.Fatalf("refused requests changed files: %v", d)
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "victim")); string(got) != "keep" {
		t.Fatalf("file outside the upload directory = %q, want %q", got, "keep")
	}
}

// TestUploadLargerThanDeclaredBound: nbytes above the signed max_nbytes is
// refused before a byte is written, whatever the body holds.
func TestUploadLargerThanDeclaredBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_10_0_r0_0"
	sig := b.cert(t, name, 64)
	before := snapshot(t, b.root)
	rep := b.post(t, uploadBody(t, name, sig, 64, 65, 0, payload(65)))
	if rep.Status != protocol.UploadPermanent || !strings.Contains(rep.Message, "exceeds limit") {
		t.Fatalf("upload of 65 bytes with max_nbytes 64 = %+v, want status -1, exceeds limit", rep)
	}
	if d := before.diff(snapshot(t, b.root)); len(d) != 0 {
		t.Fatalf("refused upload changed files: %v", d)
	}
	if rep := b.post(t, uploadBody(t, name, sig, 64, 64, 0, payload(1000))); rep.Status != protocol.UploadOK {
		t.Fatalf("upload of exactly max_nbytes with a longer body = %+v, want status 0", rep)
	}
	if got, _ := b.stored(t, name); len(got) != 64 {
		t.Fatalf("stored %d bytes, want 64", len(got))
	}
}
