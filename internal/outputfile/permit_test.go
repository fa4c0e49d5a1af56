package outputfile_test

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/outputfile"
)

// TestPermitsWriteFind: permits written are found by name; writing them
// again (an import run after a crash) changes nothing; a later write adds
// to a bucket and replaces a permit of the same name; they live outside
// the fan-out buckets the orphan sweep walks.
func TestPermitsWriteFind(t *testing.T) {
	t.Parallel()
	const fan = 4 // few buckets, so several names share one
	dir := t.TempDir()
	first := []outputfile.Permit{
		{Name: "wu_a_0_0", MaxNbytes: 100, Expires: 1000},
		{Name: "wu_b_0_0", MaxNbytes: 200, Expires: 2000},
		{Name: "wu c with spaces_0_0", MaxNbytes: 300, Expires: 3000},
		{Name: "wu_d_0_1", MaxNbytes: 400, Expires: 4000},
		{Name: "wu_e_0_0", MaxNbytes: 500, Expires: 5000},
	}
	for range 2 {
		if err := outputfile.WritePermits(dir, fan, first); err != nil {
			t.Fatalf("WritePermits: %v", err)
		}
	}
	snapshot := readTree(t, filepath.Join(dir, outputfile.PermitDir))
	if err := outputfile.WritePermits(dir, fan, first); err != nil {
		t.Fatal(err)
	}
	if again := readTree(t, filepath.Join(dir, outputfile.PermitDir)); !maps.Equal(snapshot, again) {
		t.Errorf("writing the same permits again changed the files:\n%v\nthen\n%v", snapshot, again)
	}
	replaced := outputfile.Permit{Name: "wu_a_0_0", MaxNbytes: 150, Expires: 1500}
	added := outputfile.Permit{Name: "wu_f_0_0", MaxNbytes: 600, Expires: 6000}
	if err := outputfile.WritePermits(dir, fan, []outputfile.Permit{replaced, added}); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	want := append([]outputfile.Permit{replaced, added}, first[1:]...)
	for _, p := range want {
		got, ok, err := outputfile.FindPermit(root, fan, p.Name)
		if err != nil || !ok || got != p {
			t.Errorf("FindPermit(%q) = %+v, %v, %v; want %+v, true, nil", p.Name, got, ok, err, p)
		}
	}
	for _, name := range []string{"wu_a_0", "wu_a_0_00", "wu_zz_0_0", "wu"} {
		if got, ok, err := outputfile.FindPermit(root, fan, name); ok || err != nil {
			t.Errorf("FindPermit(%q) = %+v, %v, %v; want no permit", name, got, ok, err)
		}
	}
	// Nothing in the fan-out buckets.
	for _, p := range want {
		if _, err := os.Stat(filepath.Join(dir, fanout.Dir(p.Name, fan))); err == nil {
			t.Errorf("bucket %s exists: permits must stay in %s", fanout.Dir(p.Name, fan), outputfile.PermitDir)
		}
	}
}

// TestPermitsRefused: a permit that could open a name no output has, or
// with no size limit, is not written, and nothing else of the batch is.
func TestPermitsRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []outputfile.Permit{
		{Name: "../escape", MaxNbytes: 1, Expires: 1},
		{Name: "a/b", MaxNbytes: 1, Expires: 1},
		{Name: "tab\there", MaxNbytes: 1, Expires: 1},
		{Name: "", MaxNbytes: 1, Expires: 1},
		{Name: "no_limit_0", MaxNbytes: 0, Expires: 1},
	} {
		dir := t.TempDir()
		err := outputfile.WritePermits(dir, 16, []outputfile.Permit{{Name: "good_0", MaxNbytes: 1, Expires: 1}, p})
		if err == nil {
			t.Errorf("WritePermits(%+v) = nil, want an error", p)
		}
		if _, err := os.Stat(filepath.Join(dir, outputfile.PermitDir)); err == nil {
			t.Errorf("WritePermits(%+v) failed but wrote permits", p)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
