package appversion

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const sig = "00112233\n.\n"

func files() []File {
	return []File{
		{Name: "demo_100_x86_64-pc-linux-gnu", Nbytes: 1234, MD5: strings.Repeat("a", 32), Signature: sig, MainProgram: true},
		{Name: "demo_100_x86_64-pc-linux-gnu_data.txt", Nbytes: 5, MD5: strings.Repeat("b", 32), Signature: sig,
			OpenName: "data.txt", CopyFile: true},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range []Version{
		{Files: files()},
		{Cmdline: "--mode fast --db 'a b' <x> & y", Files: files()},
		{Cmdline: "--sim"}, // a version without files, for the simulated client
	} {
		doc, err := Format(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Parse(doc)
		if err != nil || !reflect.DeepEqual(out, in) {
			t.Fatalf("Parse(Format(%+v)) = %+v, %v", in, out, err)
		}
	}
	if out, err := Parse("  \n"); err != nil || !reflect.DeepEqual(out, Version{}) {
		t.Fatalf("Parse(empty) = %+v, %v; want no files", out, err)
	}
	if doc, err := Format(Version{}); err != nil || doc != "" {
		t.Fatalf("Format(no files, no cmdline) = %q, %v; want the empty document", doc, err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Check(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Check(no files) = %v, want ErrInvalid", err)
	}
	cases := map[string]func(fs []File) []File{
		"two mains":     func(fs []File) []File { fs[1].MainProgram = true; return fs },
		"no main":       func(fs []File) []File { fs[0].MainProgram = false; return fs },
		"duplicate":     func(fs []File) []File { fs[1].Name = fs[0].Name; return fs },
		"path name":     func(fs []File) []File { fs[0].Name = "../x"; return fs },
		"bad open name": func(fs []File) []File { fs[1].OpenName = "a/b"; return fs },
		"upper md5":     func(fs []File) []File { fs[0].MD5 = strings.Repeat("A", 32); return fs },
		"short md5":     func(fs []File) []File { fs[0].MD5 = "abc"; return fs },
		"unsigned":      func(fs []File) []File { fs[1].Signature = " \n"; return fs },
	}
	for name, mutate := range cases {
		if _, err := Format(Version{Files: mutate(files())}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Format with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Parse(`<app_version_files><file><name>../../etc/passwd</name></file></app_version_files>`); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse of a path name = %v, want ErrInvalid", err)
	}
	for _, bad := range []string{strings.Repeat("x", MaxCmdline+1), "a\nb", " --x", "--x\t", "\x00"} {
		if _, err := Format(Version{Cmdline: bad, Files: files()}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Format(cmdline %q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := Parse(`<app_version_files><cmdline>a&#10;b</cmdline></app_version_files>`); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse of a two-line cmdline = %v, want ErrInvalid", err)
	}
	if _, err := Format(Version{Cmdline: strings.Repeat("x", MaxCmdline), Files: files()}); err != nil {
		t.Errorf("Format(cmdline of %d bytes) = %v, want it taken", MaxCmdline, err)
	}
}

func TestFileName(t *testing.T) {
	t.Parallel()
	if got := FileName("demo", 100, "x86_64-pc-linux-gnu", "demo_app", true); got != "demo_100_x86_64-pc-linux-gnu" {
		t.Errorf("FileName(main) = %q", got)
	}
	if got := FileName("demo", 100, "x86_64-pc-linux-gnu", "lib.so", false); got != "demo_100_x86_64-pc-linux-gnu_lib.so" {
		t.Errorf("FileName(other) = %q", got)
	}
}

func TestSignaturesRoundTrip(t *testing.T) {
	t.Parallel()
	in := []Signed{
		{Base: "demo_app", MD5: strings.Repeat("c", 32), Signature: "aa\nbb\n.\n"},
		{Base: "data.txt", MD5: strings.Repeat("d", 32), Signature: "cc\n.\n"},
	}
	out, err := ParseSignatures(FormatSignatures(in))
	if err != nil || len(out) != 2 || !reflect.DeepEqual(out["demo_app"], in[0]) || !reflect.DeepEqual(out["data.txt"], in[1]) {
		t.Fatalf("ParseSignatures(FormatSignatures(%+v)) = %+v, %v", in, out, err)
	}
	for _, bad := range []string{
		"demo_app\naa\n.\n", // no md5
		"demo_app " + strings.Repeat("c", 32) + "\naa\n",                                             // no closing dot
		"demo_app " + strings.Repeat("c", 32) + "\n.\ndemo_app " + strings.Repeat("c", 32) + "\n.\n", // twice
	} {
		if _, err := ParseSignatures(bad); err == nil {
			t.Errorf("ParseSignatures(%q) succeeded, want an error", bad)
		}
	}
}
