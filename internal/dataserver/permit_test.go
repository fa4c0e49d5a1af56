package dataserver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/protocol"
)

// TestUploadPermit: an upload without a certificate, which tasks imported
// from a BOINC project that signed none make, is accepted only under an
// import permit naming the file, within the permit's size limit whatever
// the request claims, before the permit's expiry, and never to a file the
// scheduler closed; a request with a certificate is judged by it alone.
func TestUploadPermit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().Unix()
	permits := []outputfile.Permit{
		{Name: "imp_ok_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_nomax_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_big_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_claim_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_expired_0", MaxNbytes: 100, Expires: now - 1},
		{Name: "imp_closed_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_forged_0", MaxNbytes: 100, Expires: now + 3600},
		{Name: "imp_signed_0", MaxNbytes: 100, Expires: now + 3600},
	}
	if err := outputfile.WritePermits(b.upload, testFanout, permits); err != nil {
		t.Fatalf("WritePermits: %v", err)
	}
	// The scheduler recorded imp_closed's report before its upload came.
	closed, err := fanout.Path(b.upload, "imp_closed_0", testFanout)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := outputfile.Close(closed); err != nil {
		t.Fatal(err)
	}
	data := []byte("twelve bytes")
	n := int64(len(data))
	big := payload(101)
	for _, tc := range []struct {
		what, name, sig string
		max             int64 // max_nbytes the request claims; -1 none
		data            []byte
		want            int
		wantStored      bool
	}{
		{"permit, no certificate", "imp_ok_0", "", 100, data, protocol.UploadOK, true},
		{"permit, no max_nbytes in the request", "imp_nomax_0", "", -1, data, protocol.UploadOK, true},
		{"no permit, no certificate", "imp_none_0", "", 100, data, protocol.UploadPermanent, false},
		{"over the permit's limit", "imp_big_0", "", 100, big, protocol.UploadPermanent, false},
		{"over the permit's limit, larger limit claimed", "imp_claim_0", "", 1 << 20, big, protocol.UploadPermanent, false},
		{"permit expired", "imp_expired_0", "", 100, data, protocol.UploadPermanent, false},
		{"permit, file closed by the scheduler", "imp_closed_0", "", 100, data, protocol.UploadPermanent, false},
		{"permit, forged certificate", "imp_forged_0", "0123456789abcdef\n.\n", 100, data, protocol.UploadPermanent, false},
		{"permit, good certificate", "imp_signed_0", b.cert(t, "imp_signed_0", 100), 100, data, protocol.UploadOK, true},
	} {
		rep := b.post(t, uploadBody(t, tc.name, tc.sig, tc.max, int64(len(tc.data)), 0, tc.data))
		if rep.Status != tc.want {
			t.Errorf("%s: upload of %s = %+v, want status %d", tc.what, tc.name, rep, tc.want)
		}
		got, stored := b.stored(t, tc.name)
		if tc.name == "imp_closed_0" {
			stored = len(got) > 0
		}
		if stored != tc.wantStored || (stored && string(got) != string(tc.data)) {
			t.Errorf("%s: stored %v (%d bytes), want stored %v", tc.what, stored, len(got), tc.wantStored)
		}
	}
	// Uploaded twice (the reply was lost): acknowledged, not rewritten.
	if rep := b.post(t, uploadBody(t, "imp_ok_0", "", 100, n, 0, data)); rep.Status != protocol.UploadOK {
		t.Errorf("second upload of a finished permitted file = %+v, want status 0", rep)
	}
	if got := testutil.ToFloat64(b.h.metrics.permitted); got != 6 {
		t.Errorf("upload_permits_used_total = %v, want 6 (ok, nomax, big, claim, closed, and the retry of ok; none with a certificate or expired)", got)
	}
}

// TestUploadPermitUnreadable: a permit file the data server cannot parse
// makes the client retry later rather than lose its output.
func TestUploadPermitUnreadable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "imp_bad_0"
	dir := filepath.Join(b.upload, outputfile.PermitDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fanout.Dir(name, testFanout)), []byte(name+"\tmany\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := b.post(t, uploadBody(t, name, "", 100, 3, 0, []byte("abc")))
	if rep.Status != protocol.UploadTransient {
		t.Errorf("upload under an unreadable permit = %+v, want status %d (retry)", rep, protocol.UploadTransient)
	}
}

// TestUploadPermitRealClient replays the real client's upload without a
// certificate (sample 16) under a permit for its file.
func TestUploadPermitRealClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if rep := b.post(t, httpBody(t, "16_upload_POST_without_xml_signature.http")); rep.Status != protocol.UploadPermanent {
		t.Fatalf("sample 16 without a permit = %+v, want status -1", rep)
	}
	p := outputfile.Permit{Name: "wu_upper_1_0_r0_out", MaxNbytes: 100000, Expires: time.Now().Add(time.Hour).Unix()}
	if err := outputfile.WritePermits(b.upload, testFanout, []outputfile.Permit{p}); err != nil {
		t.Fatal(err)
	}
	if rep := b.post(t, httpBody(t, "16_upload_POST_without_xml_signature.http")); rep.Status != protocol.UploadOK {
		t.Fatalf("sample 16 under a permit = %+v, want status 0", rep)
	}
	if got, _ := b.stored(t, p.Name); md5hex(got) != "cc4b471dacedcb39d73c6fa176272933" {
		t.Errorf("stored %q, want the client's 23 bytes", got)
	}
}
