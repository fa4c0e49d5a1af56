package scheduler

import (
	"crypto/md5"
	"crypto/rsa"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

// codeSignKeys are two code-signing keys: the project's and, for rotation,
// its predecessor.
var codeSignKeys = sync.OnceValues(func() ([2]*rsa.PrivateKey, error) {
	var ks [2]*rsa.PrivateKey
	for i := range ks {
		k, err := keys.Generate()
		if err != nil {
			return ks, err
		}
		ks[i] = k
	}
	return ks, nil
})

func codeSignKey(t *testing.T, i int) *rsa.PrivateKey {
	t.Helper()
	ks, err := codeSignKeys()
	if err != nil {
		t.Fatal(err)
	}
	return ks[i]
}

// installVersion writes the files into a download directory, signed with
// k, and stores their document as the fixture's app version's xml_doc.
func (f *fixture) installVersion(k *rsa.PrivateKey, files map[string][]byte, order []string) string {
	f.t.Helper()
	dir := f.t.TempDir()
	var list []appversion.File
	for i, name := range order {
		data := files[name]
		path, err := fanout.Path(dir, name, 16)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			f.t.Fatal(err)
		}
		sig, err := keys.Sign(k, data)
		if err != nil {
			f.t.Fatal(err)
		}
		sum := md5.Sum(data)
		af := appversion.File{Name: name, Nbytes: float64(len(data)), MD5: hex.EncodeToString(sum[:]), Signature: sig,
			MainProgram: i == 0}
		if i > 0 {
			af.OpenName, af.CopyFile = strings.TrimPrefix(name, "demo_100_x86_64-pc-linux-gnu_"), true
		}
		list = append(list, af)
	}
	doc, err := appversion.Format(appversion.Version{Files: list})
	if err != nil {
		f.t.Fatal(err)
	}
	f.setVersionDoc(doc)
	return dir
}

func (f *fixture) setVersionDoc(doc string) {
	f.t.Helper()
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE app_version SET xml_doc = ? WHERE id = ?`, doc, f.avID); err != nil {
		f.t.Fatal(err)
	}
	f.publishTables()
}

// setFields names the fields of a struct that are not zero.
func setFields(v any) []string {
	rv := reflect.ValueOf(v)
	var out []string
	for i := 0; i < rv.NumField(); i++ {
		if !rv.Field(i).IsZero() {
			out = append(out, rv.Type().Field(i).Name)
		}
	}
	return out
}

func TestSignedAppVersionInReply(t *testing.T) {
	t.Parallel()
	k := codeSignKey(t, 0)
	pub := keys.FormatPublic(&k.PublicKey)
	f := setup(t, func(o *Options) { o.CodeSignKey = pub })
	const mainName, dataName = "demo_100_x86_64-pc-linux-gnu", "demo_100_x86_64-pc-linux-gnu_data.txt"
	files := map[string][]byte{mainName: []byte("#!/bin/sh\necho hi > out\n"), dataName: []byte("data\n")}
	dir := f.installVersion(k, files, []string{mainName, dataName})
	f.addJob("wua", job{})
	f.addJob("wub", job{})

	rep := f.rpc(request{workSecs: 1000, instances: 2, fpops: 2.5e9})
	if len(rep.Results) != 2 || len(rep.AppVersions) != 1 || len(rep.Apps) != 1 {
		t.Fatalf("reply: %d results, %d app versions, %d apps; want 2, 1 (once for both), 1 (%s)",
			len(rep.Results), len(rep.AppVersions), len(rep.Apps), messages(rep))
	}
	if strings.TrimSpace(rep.CodeSignKey) != strings.TrimSpace(pub) {
		t.Fatalf("code_sign_key = %q, want the project's key for a client without one", rep.CodeSignKey)
	}
	av := rep.AppVersions[0]
	if av.AppName != "demo" || av.VersionNum != 100 || av.Platform != platformName || av.AvgNCPUs != 1 || av.Flops != 2.5e9 {
		t.Errorf("app_version = %+v; want demo 100 on %s, avg_ncpus 1, flops = the host's p_fpops 2.5e9", av, platformName)
	}
	wantRefs := []protocol.FileRef{
		{FileName: mainName, MainProgram: &protocol.Empty{}},
		{FileName: dataName, OpenName: "data.txt", CopyFile: &protocol.Empty{}},
	}
	if !reflect.DeepEqual(av.FileRefs, wantRefs) {
		t.Errorf("app_version file_refs = %+v, want %+v", av.FileRefs, wantRefs)
	}
	infos := map[string]protocol.FileInfo{}
	for _, fi := range rep.FileInfos {
		if _, dup := infos[fi.Name]; dup {
			t.Errorf("file_info %s sent twice", fi.Name)
		}
		infos[fi.Name] = fi
	}
	clientKey, err := keys.ParsePublic(rep.CodeSignKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		fi, ok := infos[name]
		if !ok {
			t.Fatalf("no file_info for app file %s", name)
		}
		rel, _ := fanout.Rel(name, 16)
		if want := []string{"http://127.0.0.1:8080/download/" + rel}; !reflect.DeepEqual(fi.URLs, want) {
			t.Errorf("file_info %s urls = %v, want %v", name, fi.URLs, want)
		}
		if (fi.Executable != nil) != (name == mainName) {
			t.Errorf("file_info %s executable = %v, want it on the main program only", name, fi.Executable != nil)
		}
		sum := md5.Sum(data)
		if fi.MD5Cksum != hex.EncodeToString(sum[:]) || fi.Nbytes != float64(len(data)) {
			t.Errorf("file_info %s md5 %s nbytes %v, want %x %d", name, fi.MD5Cksum, fi.Nbytes, sum, len(data))
		}
		// What the client checks: the downloaded bytes against the key it
		// was sent.
		path, _ := fanout.Path(dir, name, 16)
		served, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := keys.Verify(clientKey, served, fi.FileSignature); err != nil {
			t.Errorf("keys.Verify(code_sign_key, %s, file_signature) = %v", name, err)
		}
	}
	for _, wu := range rep.Workunits {
		for _, r := range wu.FileRefs {
			if r.OpenName != "in" || r.CopyFile == nil {
				t.Errorf("workunit %s file_ref %+v: want open_name in and copy_file", wu.Name, r)
			}
		}
	}
	for _, res := range rep.Results {
		for _, r := range res.FileRefs {
			if r.OpenName != "out" || r.CopyFile == nil {
				t.Errorf("result %s file_ref %+v: want open_name out and copy_file", res.Name, r)
			}
		}
	}

	// The reply the real client accepted (samples/03) sets no field of the
	// app's file_info and app_version that this one leaves out.
	b, err := os.ReadFile("../protocol/testdata/samples/03_scheduler_reply_with_work_signed.xml")
	if err != nil {
		t.Fatal(err)
	}
	sample, err := protocol.ParseSchedulerReply(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range sample.FileInfos {
		if fi.Executable == nil {
			continue
		}
		if missing := diff(setFields(fi), setFields(infos[mainName])); len(missing) > 0 {
			t.Errorf("main program file_info lacks %v, which the accepted sample has", missing)
		}
	}
	if missing := diff(setFields(sample.AppVersions[0]), setFields(av)); len(missing) > 0 {
		t.Errorf("app_version lacks %v, which the accepted sample has", missing)
	}
	if missing := diff(setFields(sample.AppVersions[0].FileRefs[0]), setFields(av.FileRefs[0])); len(missing) > 0 {
		t.Errorf("main program file_ref lacks %v, which the accepted sample has", missing)
	}
}

// diff returns the names in want that are not in got.
func diff(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

func TestUnreadableAppVersionIsNotSent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setVersionDoc("<app_version_files><file><name>../x</name></file></app_version_files>")
	f.addJob("wua", job{})
	rep := f.rpc(request{workSecs: 1000, instances: 1})
	if len(rep.Results) != 0 || len(rep.AppVersions) != 0 {
		t.Fatalf("reply with an unreadable app version: %d results, %d app versions; want none (%s)",
			len(rep.Results), len(rep.AppVersions), messages(rep))
	}
}

func TestCodeSignKey(t *testing.T) {
	t.Parallel()
	oldKey, newKey := codeSignKey(t, 1), codeSignKey(t, 0)
	oldPub, newPub := keys.FormatPublic(&oldKey.PublicKey), keys.FormatPublic(&newKey.PublicKey)
	rotation, err := keys.SignRotation(oldKey, &newKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	withKey := func(f *fixture, hostID int64, key string) *protocol.SchedulerReply {
		t.Helper()
		body := request{auth: f.user.Authenticator, hostID: hostID}.body()
		if key != "" {
			body = strings.Replace(body, "</platform_name>", "</platform_name>\n<code_sign_key>\n"+key+"</code_sign_key>", 1)
		}
		code, out := f.post(body)
		if code != 200 {
			t.Fatalf("POST /scheduler = %d %q", code, out)
		}
		rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	for _, tc := range []struct {
		name      string
		signature string
		client    string
		wantKey   bool
		wantSig   bool
	}{
		{name: "client without a key", client: "", wantKey: true},
		{name: "client with the key", client: newPub},
		{name: "client with the key, other spacing", client: strings.ToUpper(strings.ReplaceAll(newPub, "\n", "\n\n"))},
		{name: "client with the old key, no rotation signature", client: oldPub},
		{name: "client with the old key, rotated", signature: rotation, client: oldPub, wantKey: true, wantSig: true},
		{name: "client with the key, rotated", signature: rotation, client: newPub},
		{name: "client without a key, rotated", signature: rotation, client: "", wantKey: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, func(o *Options) { o.CodeSignKey, o.CodeSignKeySignature = newPub, tc.signature })
			hostID := f.rpc(request{}).HostID
			rep := withKey(f, hostID, tc.client)
			if gotKey := rep.CodeSignKey != ""; gotKey != tc.wantKey {
				t.Fatalf("code_sign_key sent = %v, want %v", gotKey, tc.wantKey)
			}
			if gotSig := rep.CodeSignKeySignature != ""; gotSig != tc.wantSig {
				t.Fatalf("code_sign_key_signature sent = %v, want %v", gotSig, tc.wantSig)
			}
			if tc.wantKey && strings.TrimSpace(rep.CodeSignKey) != strings.TrimSpace(newPub) {
				t.Fatalf("code_sign_key = %q, want the project's", rep.CodeSignKey)
			}
			if tc.wantSig {
				// What a client holding the old key checks before it takes
				// the new one.
				if err := keys.VerifyRotation(&oldKey.PublicKey, rep.CodeSignKey, rep.CodeSignKeySignature); err != nil {
					t.Fatalf("keys.VerifyRotation(old key, sent key, sent signature) = %v", err)
				}
			}
		})
	}
}
