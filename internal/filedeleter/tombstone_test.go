package filedeleter_test

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/dataserver"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// uploader is the real data server's upload handler over b's directories,
// checking certificates signed with its key.
type uploader struct {
	h   *dataserver.Handler
	key ed25519.PrivateKey
}

func (b *bundle) uploader(t *testing.T) *uploader {
	t.Helper()
	key, err := keys.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	h, err := dataserver.New(dataserver.Options{DownloadDir: b.download, UploadDir: b.upload, Fanout: fan,
		UploadCertKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &uploader{h: h, key: key}
}

// upload sends the whole of data as file name with a certificate expiring
// at expires, as the scheduler signs them, and returns the reply.
func (u *uploader) upload(t *testing.T, name string, expires time.Time, data []byte) *protocol.UploadReply {
	t.Helper()
	const maxNbytes = 1e6
	sig := keys.UploadSignature(keys.SignEd25519(u.key, []byte(keys.UploadCertificate(name, maxNbytes, expires.Unix()))), expires.Unix())
	var body bytes.Buffer
	if err := protocol.WriteUploadRequest(&body, &protocol.UploadRequest{CoreClientMajorVersion: 7, CoreClientMinorVersion: 20,
		FileUpload: true, Name: name, XMLSignature: sig, MaxNbytes: maxNbytes, HasMaxNbytes: true,
		Nbytes: int64(len(data)), MD5Cksum: "00"}); err != nil {
		t.Fatal(err)
	}
	body.Write(data)
	rec := httptest.NewRecorder()
	u.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, dataserver.UploadPath, &body))
	rep, err := protocol.ParseUploadReply(rec.Body)
	if err != nil {
		t.Fatalf("upload %s: reply %q: %v", name, rec.Body.String(), err)
	}
	return rep
}

// setDeadline sets result id's report deadline.
func (b *bundle) setDeadline(t *testing.T, id int64, deadline time.Time) {
	t.Helper()
	if _, err := b.st.DB().Exec(`UPDATE result SET report_deadline = ? WHERE id = ?`, deadline.Unix(), id); err != nil {
		t.Fatal(err)
	}
}

// TestNoUploadAfterDeletionWhileCertificateValid: once the file deleter
// removed a result's outputs, the result's upload certificates write
// nothing, even those that have not expired yet (report deadline plus the
// upload grace still ahead): the deleter leaves an empty closed tombstone
// that lasts until the certificates expire. Outputs whose certificates
// already expired leave nothing behind.
func TestNoUploadAfterDeletionWhileCertificateValid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.now = time.Now().Truncate(time.Second)
	const grace = time.Hour
	b.grace = grace
	b.build(t)
	u := b.uploader(t)
	wu, _ := b.job(t, "tomb", state.FileDeleteReady)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		valid    bool // whether the certificate is still good
		write    []int
	}{
		{"deadline ahead", b.now.Add(24 * time.Hour), true, []int{0}},
		{"within the grace", b.now.Add(-grace / 2), true, []int{0, 1}},
		{"expired", b.now.Add(-2 * grace), false, []int{0}},
	} {
		rname := "tomb_" + tc.name[:3]
		id, paths := b.result(t, wu, rname, state.FileDeleteReady, tc.write...)
		b.setDeadline(t, id, tc.deadline)
		if _, err := b.svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if fds, _ := b.resultState(t, id); fds != state.FileDeleteDone {
			t.Errorf("%s: file_delete_state %v, want done", tc.name, fds)
		}
		expires := tc.deadline.Add(grace)
		until := outputfile.TombstoneExpiry(expires)
		for i, p := range paths {
			st, err := os.Lstat(p)
			switch {
			case !tc.valid && !os.IsNotExist(err):
				t.Errorf("%s: output %d after deletion: %v, %v; want nothing left (its certificate expired)", tc.name, i, st, err)
			case tc.valid && err != nil:
				t.Errorf("%s: output %d after deletion: %v; want a tombstone", tc.name, i, err)
			case tc.valid && !outputfile.Tombstoned(st, b.now):
				t.Errorf("%s: output %d after deletion: mode %v size %d mtime %v; want an empty closed tombstone until %v",
					tc.name, i, st.Mode(), st.Size(), st.ModTime(), expires)
			case tc.valid && !st.ModTime().Equal(until):
				t.Errorf("%s: tombstone %d mtime %v, want the certificate's expiry %v rounded up to a step, %v", tc.name, i, st.ModTime(), expires, until)
			}
		}
		if !tc.valid {
			continue
		}
		for i := range paths {
			name := jobxml.OutputName(rname, i)
			rep := u.upload(t, name, expires, []byte("rewritten after deletion"))
			if rep.Status == protocol.UploadOK {
				t.Errorf("%s: upload of %s with a valid certificate after deletion = %+v, want refused", tc.name, name, rep)
			}
			if st, err := os.Stat(paths[i]); err == nil && st.Size() != 0 {
				t.Errorf("%s: upload after deletion stored %d bytes in %s", tc.name, st.Size(), name)
			}
		}
	}
}

// TestOrphanSweepKeepsTombstonesUntilExpiry: a tombstone lasts while its
// certificates may still be used (the sweep judges by mtime, which is the
// expiry, so it is never old before then), and once it is orphan-age past
// its expiry and its result row was purged it is an orphan like any other.
func TestOrphanSweepKeepsTombstonesUntilExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.grace = time.Hour
	svc, _ := b.sweeper(t, orphanAge)
	wu, _ := b.job(t, "sweep", state.FileDeleteReady)
	deadline := b.now.Add(10 * 24 * time.Hour) // ten orphan-ages ahead
	id, paths := b.result(t, wu, "sweep_0", state.FileDeleteReady, 0)
	b.setDeadline(t, id, deadline)
	// The tombstone stands until the certificates' expiry rounded up.
	expires := outputfile.TombstoneExpiry(deadline.Add(b.grace))
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	tombstone := paths[0]
	if !exists(t, tombstone) {
		t.Fatalf("no tombstone at %s after deletion", tombstone)
	}
	// As db_purge does once the job is archived: nothing names it now.
	if _, err := b.st.DB().Exec(`DELETE FROM result WHERE id = ?`, id); err != nil {
		t.Fatal(err)
	}
	// Each time is at least orphanEvery after the last, so each starts a
	// round of the sweep.
	for _, at := range []time.Time{b.now.Add(orphanEvery), expires.Add(-time.Second), expires.Add(orphanAge - orphanEvery)} {
		b.now = at
		if _, err := svc.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if !exists(t, tombstone) {
			t.Fatalf("sweep at expiry%+v deleted the tombstone, want it kept until orphan-age past its expiry", at.Sub(expires))
		}
	}
	b.now = expires.Add(orphanAge)
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, tombstone) {
		t.Errorf("sweep orphan-age past the expiry kept the tombstone of a purged result, want it deleted")
	}
}

// TestOrphanSweepKeepsExpiredTombstoneOfLiveRow: a tombstone whose result
// row still exists is that row's, as any file a row names.
func TestOrphanSweepKeepsExpiredTombstoneOfLiveRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.sweeper(t, orphanAge)
	wu, _ := b.job(t, "live", state.FileDeleteReady)
	id, paths := b.result(t, wu, "live_0", state.FileDeleteReady, 0)
	deadline := b.now.Add(time.Hour)
	b.setDeadline(t, id, deadline)
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.now = deadline.Add(10 * orphanAge)
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, paths[0]) {
		t.Errorf("sweep deleted the tombstone of a result whose row exists")
	}
}
