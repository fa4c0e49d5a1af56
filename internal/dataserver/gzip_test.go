package dataserver

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
)

// TestDownloadGzippedCopy: the gzip'd copy of an input, staged as NAME.gz
// in NAME's fan-out directory, is served at NAME's URL with ".gz" (the
// scheduler's <gzipped_url>), byte for byte and without Content-Encoding,
// so the client saves it whole, resumes it with a Range like any download,
// and gunzips it to the file whose size and md5 the reply gave. It is not
// served from any other directory.
func TestDownloadGzippedCopy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const name = "job_7_params"
	data := payload(50000)
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	gz := z.Bytes()
	b.stage(t, name, data)
	p, err := fanout.Path(b.download, name, testFanout)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".gz", gz, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := fanout.Dir(name, testFanout)
	path := DownloadPrefix + dir + "/" + name + ".gz"

	// As the client asks: it turns off decoding, so no Accept-Encoding.
	resp, body := b.get(t, path, "Accept-Encoding", "identity")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, gz) {
		t.Fatalf("GET %s = %d with %d bytes, want 200 with the %d bytes of the gzip'd copy", path, resp.StatusCode, len(body), len(gz))
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("GET %s: Content-Encoding %q, want none (the client gunzips the file itself)", path, ce)
	}
	r, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(r)
	if err != nil || md5hex(plain) != md5hex(data) || len(plain) != len(data) {
		t.Errorf("gunzipped download: %d bytes md5 %s (%v), want the file's %d bytes md5 %s", len(plain), md5hex(plain), err, len(data), md5hex(data))
	}
	half := len(gz) / 2
	resp, body = b.get(t, path, "Range", "bytes="+strconv.Itoa(half)+"-")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, gz[half:]) {
		t.Errorf("GET %s resumed at %d = %d with %d bytes, want 206 with the rest", path, half, resp.StatusCode, len(body))
	}

	// Only NAME's directory (or, for a file itself called NAME.gz, that
	// name's own) holds it.
	for d := 0; d < testFanout; d++ {
		other := strconv.FormatInt(int64(d), 16)
		_, ok := b.h.downloadPath(other + "/" + name + ".gz")
		if want := other == dir || other == fanout.Dir(name+".gz", testFanout); ok != want {
			t.Errorf("downloadPath(%s/%s.gz) ok = %v, want %v", other, name, ok, want)
		}
	}
	if _, ok := b.h.downloadPath(fanout.Dir("", testFanout) + "/.gz"); ok != (fanout.Dir(".gz", testFanout) == fanout.Dir("", testFanout)) {
		t.Errorf("downloadPath of a bare .gz took the copy of a file with no name")
	}
}
