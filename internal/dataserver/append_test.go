package dataserver

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

// TestUploadOnlyAppends: an unfinished file grows only by an append at its
// stored size. A write at any other offset (the attack of issue 16: 17
// bytes of a declared 1 MiB, then other bytes at offset 0) changes
// nothing, and the reply is transient with the stored size, so a real
// client asks for the size and resumes from there.
func TestUploadOnlyAppends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_append_0_r0_0"
	const declared = 1 << 20
	sig := b.cert(t, name, declared)
	first := []byte("seventeen bytes!!")
	if rep := b.post(t, uploadBody(t, name, sig, declared, declared, 0, first)); rep.Status != protocol.UploadTransient {
		t.Fatalf("17 bytes of a declared 1 MiB = %+v, want transient", rep)
	}
	evil := bytes.Repeat([]byte("X"), 64)
	for _, off := range []int64{0, 5, 16, 18, 1000} {
		rep := b.post(t, uploadBody(t, name, sig, declared, declared, off, evil))
		if rep.Status != protocol.UploadTransient || !rep.HasFileSize || rep.FileSize != int64(len(first)) {
			t.Errorf("write at offset %d of a file holding 17 bytes = %+v, want transient with file_size 17", off, rep)
		}
		if got, _ := b.stored(t, name); !bytes.Equal(got, first) {
			t.Fatalf("write at offset %d changed the file to %q, want %q", off, got, first)
		}
	}
	// An append at the stored size is the one write accepted.
	rest := payload(declared - len(first))
	if rep := b.post(t, uploadBody(t, name, sig, declared, declared, int64(len(first)), rest)); rep.Status != protocol.UploadOK {
		t.Fatalf("append at offset 17 = %+v, want status 0", rep)
	}
	if got, _ := b.stored(t, name); !bytes.Equal(got, append(append([]byte{}, first...), rest...)) {
		t.Fatalf("after the append the file has %d bytes, not the 17 then the appended ones", len(got))
	}
}

// TestUploadSmallFileInterrupted: the real client never asks for the size
// of a file under 8 KiB (FILE_SIZE_CHECK_THRESHOLD) and always sends it
// from offset 0, so bytes of an interrupted upload of such a file are not
// kept: the retry from offset 0 is then an append at size 0.
func TestUploadSmallFileInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_small_0_r0_0"
	data := payload(5000)
	sig := b.cert(t, name, 100000)
	if rep := b.post(t, uploadBody(t, name, sig, 100000, int64(len(data)), 0, data[:1234])); rep.Status != protocol.UploadTransient {
		t.Fatalf("upload cut after 1234 of 5000 bytes = %+v, want transient", rep)
	}
	if got, _ := b.stored(t, name); len(got) != 0 {
		t.Fatalf("interrupted upload of a small file left %d bytes; want none (the client restarts at 0)", len(got))
	}
	if rep := b.post(t, uploadBody(t, name, sig, 100000, int64(len(data)), 0, data)); rep.Status != protocol.UploadOK {
		t.Fatalf("retry from offset 0 = %+v, want status 0", rep)
	}
	if got, _ := b.stored(t, name); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, want the 5000 sent", len(got))
	}
}

// TestUploadRefusesNegativeSizes: negative nbytes, offset or max_nbytes
// are refused for good and nothing is written.
func TestUploadRefusesNegativeSizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tc := range []struct {
		what                      string
		maxNbytes, nbytes, offset string
	}{
		{"negative nbytes", "100", "-5", "0"},
		{"negative offset", "100", "10", "-5"},
		{"negative max_nbytes", "-1", "10", "0"},
		{"negative offset and nbytes", "100", "-10", "-20"},
	} {
		name := fmt.Sprintf("wu_neg_%d_r0_0", i)
		body := "<data_server_request>\n<file_upload>\n<file_info>\n<name>" + name + "</name>\n<xml_signature>\n" +
			b.cert(t, name, 100) + "</xml_signature>\n<max_nbytes>" + tc.maxNbytes + "</max_nbytes>\n</file_info>\n<nbytes>" +
			tc.nbytes + "</nbytes>\n<md5_cksum>00</md5_cksum>\n<offset>" + tc.offset + "</offset>\n<data>\n0123456789"
		rep := b.post(t, []byte(body))
		if rep.Status != protocol.UploadPermanent {
			t.Errorf("%s: reply %+v, want permanent status -1", tc.what, rep)
		}
		if _, ok := b.stored(t, name); ok {
			t.Errorf("%s: file written", tc.what)
		}
	}
}

// TestUploadClosedFileRefused: a file closed unfinished (its result is
// over; the scheduler closed it when it recorded the report) takes no
// more bytes at any offset, not even the append that would finish it.
func TestUploadClosedFileRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "wu_closed_0_r0_0"
	p, _ := fanout.Path(b.upload, name, testFanout)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("partial"), 0o400); err != nil {
		t.Fatal(err)
	}
	sig := b.cert(t, name, 100)
	before := snapshot(t, b.root)
	for _, tc := range []struct{ nbytes, offset int64 }{{20, 7}, {20, 0}, {7, 0}, {100, 3}} {
		rep := b.post(t, uploadBody(t, name, sig, 100, tc.nbytes, tc.offset, payload(int(tc.nbytes-tc.offset))))
		if rep.Status != protocol.UploadPermanent {
			t.Errorf("nbytes %d at offset %d to a closed file = %+v, want permanent", tc.nbytes, tc.offset, rep)
		}
	}
	if d := before.diff(snapshot(t, b.root)); len(d) != 0 {
		t.Fatalf("uploads changed a closed file: %v", d)
	}
}

// TestUploadMessagesForVolunteers: the client shows <message> in the
// volunteer's event log ("Error reported by file upload server: ..."), so
// every reply's message is one of the short sentences below, never the Go
// error behind it, which goes to the server log.
func TestUploadMessagesForVolunteers(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.MaxFileBytes = 1000 })
	name := "wu_msg_0_r0_0"
	sig := b.cert(t, name, 100)
	p, _ := fanout.Path(b.upload, "wu_msg_busy_r0_0", testFanout)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{
		"not xml":               []byte("hello"),
		"no file_info":          []byte("<data_server_request>\n<file_upload>\n<nbytes>3</nbytes>\n<data>\nabc"),
		"bad nbytes":            []byte("<data_server_request>\n<file_upload>\n<file_info>\n<name>a</name>\n</file_info>\n<nbytes>1e999</nbytes>\n<data>\nabc"),
		"negative offset":       []byte("<data_server_request>\n<file_upload>\n<file_info>\n<name>a</name>\n</file_info>\n<nbytes>3</nbytes>\n<offset>-1</offset>\n<data>\nabc"),
		"no data":               []byte("<data_server_request>\n<file_upload>\n<file_info>\n<name>a</name>\n</file_info>\n<nbytes>3</nbytes>\n"),
		"header too long":       append([]byte("<data_server_request>\n"), bytes.Repeat([]byte("x"), 20000)...),
		"too deep":              []byte("<data_server_request>\n" + strings.Repeat("<a>", 200) + "\n<data>\n"),
		"bad name":              uploadBody(t, "../x", sig, 100, 3, 0, []byte("abc")),
		"bad signature":         uploadBody(t, name, "zz\n.", 100, 3, 0, []byte("abc")),
		"over max_nbytes":       uploadBody(t, name, sig, 100, 101, 0, payload(101)),
		"offset past nbytes":    uploadBody(t, name, sig, 100, 3, 4, nil),
		"cut short":             uploadBody(t, name, sig, 100, 30, 0, []byte("abc")),
		"not an append":         uploadBody(t, name, sig, 100, 30, 0, []byte("abc")),
		"size query, bad name":  sizeQuery(t, "../../etc/passwd"),
		"fan-out dir is a file": uploadBody(t, "wu_msg_busy_r0_0", b.cert(t, "wu_msg_busy_r0_0", 100), 100, 3, 0, []byte("abc")),
	}
	// A directory where the file should be: a server-side failure.
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	for what, body := range bodies {
		rep := b.post(t, body)
		if rep.Message == "" {
			continue
		}
		if !volunteerMessages[rep.Message] && !strings.HasPrefix(rep.Message, "file size (") {
			t.Errorf("%s: message %q is not one of the volunteer messages", what, rep.Message)
		}
		for _, goText := range []string{"parse upload request", "malformed", "strconv", "too large:", "no <", "open ", ": "} {
			if strings.Contains(rep.Message, goText) {
				t.Errorf("%s: message %q holds Go error text %q", what, rep.Message, goText)
			}
		}
	}
}

// volunteerMessages are the only messages an upload reply may carry,
// besides BOINC's own "file size (N KB) exceeds limit (M KB)".
var volunteerMessages = map[string]bool{
	msgBadRequest: true, msgBadName: true, msgNotAllowed: true, msgExpired: true, msgClosed: true,
	msgServerError: true, msgBusy: true, msgIncomplete: true, msgResume: true,
}

// TestUploadCertificateExpiry: a certificate authorises nothing after the
// expiry it carries (its instance's deadline plus a grace), even for a
// file that no longer exists (the file deleter removed it after its
// result was over); one without an expiry, or whose expiry was changed,
// authorises nothing at all.
func TestUploadCertificateExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	data := []byte("output bytes")
	n := int64(len(data))
	past := time.Now().Add(-time.Minute).Unix()
	future := time.Now().Add(time.Hour).Unix()
	noExpiry := func(name string) string {
		sig, err := keys.Sign(b.key, []byte("<name>"+name+"</name><max_nbytes>100</max_nbytes>"))
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	for i, tc := range []struct {
		what string
		sig  func(name string) string
		want int
		msg  string
	}{
		{"expiry in the future", func(nm string) string { return b.certExpiring(t, nm, 100, future) }, protocol.UploadOK, ""},
		{"expired", func(nm string) string { return b.certExpiring(t, nm, 100, past) }, protocol.UploadPermanent, msgExpired},
		{"expiry moved by the client", func(nm string) string {
			return strings.Replace(b.certExpiring(t, nm, 100, past), fmt.Sprint(past), fmt.Sprint(future), 1)
		}, protocol.UploadPermanent, msgNotAllowed},
		// Tasks sent before the upgrade still upload: nothing a volunteer
		// computed is lost to it.
		{"no expiry (the certificate before expiries)", noExpiry, protocol.UploadOK, ""},
		{"no expiry, other size", func(nm string) string {
			sig, err := keys.Sign(b.key, []byte("<name>"+nm+"</name><max_nbytes>99</max_nbytes>"))
			if err != nil {
				t.Fatal(err)
			}
			return sig
		}, protocol.UploadPermanent, msgNotAllowed},
	} {
		name := fmt.Sprintf("wu_exp_%d_r0_0", i)
		rep := b.post(t, uploadBody(t, name, tc.sig(name), 100, n, 0, data))
		if rep.Status != tc.want || rep.Message != tc.msg {
			t.Errorf("%s: reply %+v, want status %d, message %q", tc.what, rep, tc.want, tc.msg)
		}
		if _, stored := b.stored(t, name); stored != (tc.want == protocol.UploadOK) {
			t.Errorf("%s: stored %v", tc.what, stored)
		}
	}
}
