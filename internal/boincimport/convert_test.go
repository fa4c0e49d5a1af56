package boincimport_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store/boinctest"
)

// TestFanoutDirMatchesBOINCForPowersOfTwo: BOINC takes hex digits 1..7 of
// the name's md5 modulo the fan-out, we take digits 0..7; for a fan-out
// that is a power of two (BOINC's default, 1024) both are the low bits, so
// BOINC's download and upload directories are ours as they are. For
// another fan-out they differ, and the import keeps inputs' URLs.
func TestFanoutDirMatchesBOINCForPowersOfTwo(t *testing.T) {
	t.Parallel()
	differ := 0
	for i := 0; i < 2000; i++ {
		name := fmt.Sprintf("wu_%d_in", i)
		for _, n := range []int{2, 16, 256, 1024, 4096} {
			if got, want := fanout.Dir(name, n), boinctest.Hash(name, n); got != want {
				t.Fatalf("fanout.Dir(%q, %d) = %s, BOINC's filename_hash %s", name, n, got, want)
			}
		}
		if fanout.Dir(name, 1000) != boinctest.Hash(name, 1000) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("fan-out 1000: every directory matched BOINC's; the import's URL rule assumes they may not")
	}
}

const sig = "0a1b2c\n.\n"

func versionDoc(md5, extraInfo, refs string) string {
	return "<file_info>\n  <name>app_1</name>\n  <url>http://x/dl/app_1</url>\n  <executable/>\n  <file_signature>\n" + sig +
		"  </file_signature>\n  <nbytes>10</nbytes>\n" + md5 + extraInfo + "</file_info>\n<app_version>\n  <app_name>a</app_name>\n" +
		"  <version_num>100</version_num>\n" + refs + "</app_version>\n"
}

const mainRef = "  <file_ref>\n    <file_name>app_1</file_name>\n    <main_program/>\n  </file_ref>\n"

func TestConvertAppVersion(t *testing.T) {
	t.Parallel()
	const sum = "0123456789abcdef0123456789abcdef"
	read := func(name string) (string, float64, error) { return sum, 10, nil }
	noFile := func(name string) (string, float64, error) { return "", 0, errors.New("no such file") }
	cases := []struct {
		name    string
		doc     string
		read    boincimport.VersionFile
		want    appversion.File
		cmdline string
		err     string
	}{
		{name: "md5 in the document: the file is not read", doc: versionDoc("  <md5_cksum>"+sum+"</md5_cksum>\n", "", mainRef), read: noFile,
			want: appversion.File{Name: "app_1", Nbytes: 10, MD5: sum, Signature: strings.TrimSpace(sig) + "\n", MainProgram: true}},
		{name: "no md5 (update_versions writes none): read from the file", doc: versionDoc("", "", mainRef), read: read,
			want: appversion.File{Name: "app_1", Nbytes: 10, MD5: sum, Signature: strings.TrimSpace(sig) + "\n", MainProgram: true}},
		{name: "open name, copy file and cmdline kept",
			doc: versionDoc("", "", "  <cmdline>--fast</cmdline>\n  <file_ref>\n    <file_name>app_1</file_name>\n    <open_name>prog</open_name>\n"+
				"    <main_program/>\n    <copy_file/>\n  </file_ref>\n"), read: read, cmdline: "--fast",
			want: appversion.File{Name: "app_1", Nbytes: 10, MD5: sum, Signature: strings.TrimSpace(sig) + "\n", MainProgram: true, OpenName: "prog", CopyFile: true}},
		{name: "no md5 and no file", doc: versionDoc("", "", mainRef), read: noFile, err: "no such file"},
		{name: "file differs in size from the document", doc: versionDoc("", "", mainRef),
			read: func(string) (string, float64, error) { return sum, 11, nil }, err: "the file has 11"},
		{name: "unsigned file", doc: strings.Replace(versionDoc("", "", mainRef), sig, "", 1), read: read, err: "no <file_signature>"},
		{name: "file_ref without file_info", doc: versionDoc("", "", mainRef+"  <file_ref>\n    <file_name>lib.so</file_name>\n  </file_ref>\n"),
			read: read, err: `"lib.so" has no <file_info>`},
		{name: "no main program", doc: versionDoc("", "", "  <file_ref>\n    <file_name>app_1</file_name>\n  </file_ref>\n"), read: read,
			err: "0 main programs"},
		{name: "not XML", doc: "<file_info>", read: read, err: "parse app version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc, names, err := boincimport.ConvertAppVersion(tc.doc, tc.read)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ConvertAppVersion = %v, want error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ConvertAppVersion: %v", err)
			}
			v, err := appversion.Parse(doc)
			if err != nil || len(v.Files) != 1 || v.Files[0] != tc.want || v.Cmdline != tc.cmdline || len(names) != 1 || names[0] != "app_1" {
				t.Errorf("converted %q (%v) = %+v, files %v; want %+v, cmdline %q", doc, err, v, names, tc.want, tc.cmdline)
			}
		})
	}
}

func wuDoc(url string) string {
	return "<file_info>\n  <name>wu_7_in</name>\n  <url>" + url + "</url>\n  <md5_cksum>0123456789abcdef0123456789abcdef</md5_cksum>\n" +
		"  <nbytes>1024</nbytes>\n</file_info>\n<workunit>\n  <file_ref>\n    <file_name>wu_7_in</file_name>\n    <open_name>in</open_name>\n" +
		"  </file_ref>\n  <command_line>-n 3</command_line>\n</workunit>\n"
}

func TestConvertWorkunit(t *testing.T) {
	t.Parallel()
	const base = "http://old.example.org/dl"
	ours := base + "/" + fanout.Dir("wu_7_in", 1024) + "/wu_7_in"
	cases := []struct {
		name, url, base string
		local           bool
	}{
		{"under the old download URL, our fan-out directory: ours to serve", ours, base, true},
		{"trailing slash on the old URL", ours, base + "/", true},
		{"another directory (another fan-out): URL kept", base + "/zz/wu_7_in", base, false},
		{"another server: URL kept", "http://cdn.example.net/wu_7_in", base, false},
		{"no old download URL given: URL kept", ours, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc, err := boincimport.ConvertWorkunit(wuDoc(tc.url), tc.base, 1024)
			if err != nil {
				t.Fatal(err)
			}
			w, err := jobxml.ParseWorkunit(doc)
			if err != nil || len(w.Inputs) != 1 || w.CommandLine != "-n 3" || w.Inputs[0].OpenName != "in" || w.Inputs[0].Nbytes != 1024 {
				t.Fatalf("converted %q: %+v (%v)", doc, w, err)
			}
			if local := len(w.Inputs[0].URLs) == 0; local != tc.local {
				t.Errorf("input URLs %v: local %v, want %v", w.Inputs[0].URLs, local, tc.local)
			}
		})
	}
	if _, err := boincimport.ConvertWorkunit("<file_info><name>a</name></file_info><workunit></workunit>", base, 1024); err == nil {
		t.Error("a file_info without its file_ref was accepted")
	}
}

func TestConvertResult(t *testing.T) {
	t.Parallel()
	doc := "<file_info>\n  <name>r_1_0</name>\n  <generated_locally/>\n  <upload_when_present/>\n  <max_nbytes>5000</max_nbytes>\n" +
		"  <url>http://old/ul</url>\n<xml_signature>\nab\n.\n</xml_signature>\n</file_info>\n<file_info>\n  <name>r_1_3</name>\n" +
		"  <max_nbytes>70</max_nbytes>\n</file_info>\n<result>\n  <name>r_1</name>\n  <wu_name>r</wu_name>\n" +
		"  <file_ref>\n    <file_name>r_1_0</file_name>\n    <open_name>out</open_name>\n    <copy_file/>\n  </file_ref>\n" +
		"  <file_ref>\n    <file_name>r_1_3</file_name>\n    <open_name>log</open_name>\n    <optional/>\n    <no_validate/>\n  </file_ref>\n</result>\n"
	in, tmpl, err := boincimport.ConvertResult("r_1", doc)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := jobxml.ParseResult(in)
	if err != nil || len(outs) != 2 || outs[1] != (jobxml.OutputFile{Name: "r_1_3", OpenName: "log", MaxNbytes: 70, Optional: true, NoValidate: true}) {
		t.Errorf("converted outputs %+v (%v)", outs, err)
	}
	body, err := boincimport.FormatOutputTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jobtemplate.ParseOutput(body)
	if err != nil {
		t.Fatal(err)
	}
	again, err := jobxml.FormatResult(parsed.Outputs("r_1"))
	if err != nil || again != in {
		t.Errorf("the output template makes %q (%v) for the same instance, want %q", again, err, in)
	}
	if _, _, err := boincimport.ConvertResult("r_2", doc); err == nil || !strings.Contains(err.Error(), "not named r_2_<n>") {
		t.Errorf("outputs of another instance's names: %v", err)
	}
	if _, _, err := boincimport.ConvertResult("r_1", "<result></result>"); err == nil {
		t.Error("an instance with no outputs was accepted")
	}
}
