package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

const sampleCert = "2ecb3ce25aab36029ffe0ee65a04888dd71a6d7daa859d5e6be655a199e2e95a\n" +
	"721e27a949f9df5660d56e35f86201c10aeb537dcaf59aa840f47e1981bad4c2\n" +
	"fab5fed79118d6e6e5a76ed3955ac8b266f227bd9d330e9568677835a2dbcbf7\n" +
	"e8543312489771480dc0aa0b99c3d0cb0052bf38c44e2153ee46cbc174154ae0\n."

func TestReadUploadRequestSamples(t *testing.T) {
	t.Parallel()
	upload := func(sig string, nbytes int64, md5 string) UploadRequest {
		return UploadRequest{CoreClientMajorVersion: 7, CoreClientMinorVersion: 20, CoreClientRelease: 5,
			FileUpload: true, Name: sampleOut, XMLSignature: sig, MaxNbytes: 100000, HasMaxNbytes: true,
			Nbytes: nbytes, MD5Cksum: md5}
	}
	for _, tc := range []struct {
		file     string
		want     UploadRequest
		dataHead string // what the reader holds after the header
	}{
		{"07_upload_POST_small_file.http", upload(sampleCert, 23, "cc4b471dacedcb39d73c6fa176272933"), "HELLO BOINC WORLD\ndone\n"},
		{"12_upload_get_file_size_POST.http", UploadRequest{CoreClientMajorVersion: 7, CoreClientMinorVersion: 20,
			CoreClientRelease: 5, GetFileSize: true, Name: sampleOut}, ""},
		{"14_upload_POST_large_file_HEAD_ONLY.http", upload(sampleCert, 20005, "a8a8ed6e024265c3999264774da8e053"), "HELLO BOINC WORLD %D\nHELLO"},
		{"16_upload_POST_without_xml_signature.http", upload("", 23, "cc4b471dacedcb39d73c6fa176272933"), "HELLO BOINC WORLD\ndone\n"},
	} {
		body := httpBody(t, tc.file)
		br := bufio.NewReader(bytes.NewReader(body))
		got, err := ReadUploadRequest(br, DefaultMaxUploadHeader)
		if err != nil {
			t.Fatalf("ReadUploadRequest(%s) error %v", tc.file, err)
		}
		if *got != tc.want {
			t.Errorf("ReadUploadRequest(%s) =\n%+v\nwant\n%+v", tc.file, *got, tc.want)
		}
		rest, _ := io.ReadAll(br)
		if !strings.HasPrefix(string(rest), tc.dataHead) || tc.dataHead == "" && len(rest) != 0 {
			t.Errorf("after ReadUploadRequest(%s) the body holds %q, want it to start with %q", tc.file, rest, tc.dataHead)
		}
		if got.FileUpload && tc.file != "14_upload_POST_large_file_HEAD_ONLY.http" && int64(len(rest)) != got.Nbytes-got.Offset {
			t.Errorf("%s: %d data bytes follow the header, want nbytes-offset = %d", tc.file, len(rest), got.Nbytes-got.Offset)
		}
		// The client-side writer reproduces the real client's header byte
		// for byte.
		var w bytes.Buffer
		if err := WriteUploadRequest(&w, got); err != nil {
			t.Fatalf("WriteUploadRequest(%s) error %v", tc.file, err)
		}
		if header := body[:len(body)-len(rest)]; w.String() != string(header) {
			t.Errorf("WriteUploadRequest(%s) =\n%q\nwant the client's\n%q", tc.file, w.String(), header)
		}
	}
}

func TestReadUploadRequestRefuses(t *testing.T) {
	t.Parallel()
	head := "<data_server_request>\n<file_upload>\n<file_info>\n<name>f</name>\n<max_nbytes>100</max_nbytes>\n</file_info>\n"
	for _, tc := range []struct {
		name string
		body string
		want error
	}{
		{"no command", "<data_server_request>\n<core_client_release>5</core_client_release>\n</data_server_request>\n", ErrMalformed},
		{"not a request", "hello", ErrMalformed},
		{"no file_info", "<data_server_request>\n<file_upload>\n<nbytes>3</nbytes>\n<data>\nabc", ErrMalformed},
		{"no nbytes", head + "<offset>0</offset>\n<data>\nabc", ErrMalformed},
		{"negative nbytes", head + "<nbytes>-3</nbytes>\n<data>\nabc", ErrMalformed},
		{"fractional offset", head + "<nbytes>3</nbytes>\n<offset>0.5</offset>\n<data>\nabc", ErrMalformed},
		{"nan max", strings.Replace(head, "100", "nan", 1) + "<nbytes>3</nbytes>\n<data>\nabc", ErrMalformed},
		{"huge nbytes", head + "<nbytes>1e300</nbytes>\n<data>\nabc", ErrMalformed},
		{"cut off before data", head + "<nbytes>3</nbytes>\n", ErrMalformed},
		{"header too long", head + strings.Repeat("x", DefaultMaxUploadHeader) + "\n<data>\n", ErrTooLarge},
		{"long line without newline", head + strings.Repeat("y", 3*DefaultMaxUploadHeader), ErrTooLarge},
	} {
		_, err := ReadUploadRequest(bufio.NewReader(strings.NewReader(tc.body)), DefaultMaxUploadHeader)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: ReadUploadRequest() error %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestReadUploadRequestLongDataLine checks that a <data> line longer than
// the read buffer is dropped whole, so file bytes start after it.
func TestReadUploadRequestLongDataLine(t *testing.T) {
	t.Parallel()
	body := "<data_server_request>\n<file_upload>\n<file_info>\n<name>f</name>\n</file_info>\n<nbytes>3</nbytes>\n" +
		"<data>" + strings.Repeat(" ", 100) + "\nabc"
	br := bufio.NewReaderSize(strings.NewReader(body), 16)
	req, err := ReadUploadRequest(br, DefaultMaxUploadHeader)
	if err != nil {
		t.Fatalf("ReadUploadRequest() error %v", err)
	}
	rest, _ := io.ReadAll(br)
	if req.Name != "f" || req.Nbytes != 3 || req.HasMaxNbytes || string(rest) != "abc" {
		t.Fatalf("ReadUploadRequest() = %+v, then %q; want name f, 3 bytes, no max_nbytes, then \"abc\"", req, rest)
	}
}

func TestUploadReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rep  UploadReply
		want string
	}{
		{UploadReply{Status: UploadOK}, string(readSample(t, "08_upload_reply.xml"))},
		{UploadReply{Status: UploadOK, HasFileSize: true}, string(readSample(t, "13_get_file_size_reply.xml"))},
		{UploadReply{Status: UploadPermanent, Message: "file size (2 KB) exceeds limit & more"},
			"<data_server_reply>\n    <status>-1</status>\n    <message>file size (2 KB) exceeds limit &amp; more</message>\n</data_server_reply>\n"},
	} {
		var b bytes.Buffer
		if err := WriteUploadReply(&b, tc.rep); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("WriteUploadReply(%+v) =\n%q\nwant\n%q", tc.rep, b.String(), tc.want)
		}
		got, err := ParseUploadReply(&b)
		if err != nil || *got != tc.rep {
			t.Errorf("ParseUploadReply(WriteUploadReply(%+v)) = %+v, %v; want the same reply", tc.rep, got, err)
		}
	}
	got, err := ParseUploadReply(strings.NewReader("<html>500</html>"))
	if err != nil || got.Status != UploadTransient {
		t.Errorf("ParseUploadReply(no status) = %+v, %v; want status %d like the client", got, err, UploadTransient)
	}
}

func TestWriteUploadRequestNeedsOneKind(t *testing.T) {
	t.Parallel()
	for _, req := range []*UploadRequest{{}, {GetFileSize: true, FileUpload: true}} {
		if err := WriteUploadRequest(io.Discard, req); err == nil {
			t.Errorf("WriteUploadRequest(%+v) = nil, want an error", req)
		}
	}
}

// FuzzParseUploadHeader is seeded with every real upload handler request
// in the samples (uploads and size queries).
func FuzzParseUploadHeader(f *testing.F) {
	names, err := filepath.Glob(filepath.Join(samples, "*_upload_*POST*.http"))
	if err != nil || len(names) < 4 {
		f.Fatalf("upload samples: %d found (%v), want the 4 recorded ones", len(names), err)
	}
	for _, name := range names {
		f.Add(httpBody(f, filepath.Base(name)))
	}
	// Past each check, so that the seed run in make test sees the refusals.
	upload := func(nbytes, offset string) []byte {
		return []byte("<data_server_request>\n<file_upload>\n<file_info>\n<name>a</name>\n</file_info>\n<nbytes>" + nbytes +
			"</nbytes>\n<offset>" + offset + "</offset>\n<data>\nabc")
	}
	f.Add(upload("-3", "0"))
	f.Add(upload("3", "-1"))
	f.Add(upload("1e999", "0"))
	f.Add(bytes.Replace(upload("3", "0"), []byte("<data>"), append(bytes.Repeat([]byte("<x>1</x>\n"), 400), "<data>"...), 1))
	f.Fuzz(func(t *testing.T, body []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(body), 64)
		req, err := ReadUploadRequest(br, 2048)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("ReadUploadRequest(%q) error %v, want one of the package's errors", body, err)
			}
			return
		}
		if req.GetFileSize == req.FileUpload {
			t.Fatalf("ReadUploadRequest(%q) = %+v: want exactly one kind", body, req)
		}
		if req.Nbytes < 0 || req.Offset < 0 || req.MaxNbytes < 0 || req.Nbytes > maxSize {
			t.Fatalf("ReadUploadRequest(%q) = %+v: sizes out of range", body, req)
		}
		rest, _ := io.ReadAll(br)
		if len(body)-len(rest) > 2048+64 {
			t.Fatalf("ReadUploadRequest consumed %d header bytes, limit 2048", len(body)-len(rest))
		}
	})
}
