package shmcache

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

func sampleTables(n int) Tables {
	t := Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux x86-64"}},
		Apps:      []row.App{{ID: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}},
	}
	for i := 0; i < n; i++ {
		t.AppVersions = append(t.AppVersions, row.AppVersion{ID: int64(i + 1), AppID: 1, VersionNum: 100 + i,
			PlatformID: 1, XMLDoc: "<app_version><version_num>" + strings.Repeat("x", i) + "</version_num></app_version>"})
	}
	return t
}

func TestTablesPublishAndRead(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 1)
	r := openCache(t, path)
	if _, _, err := r.Tables(); !errors.Is(err, ErrNoTables) {
		t.Fatalf("Tables before any publish: error = %v, want ErrNoTables", err)
	}
	want1 := sampleTables(2)
	if err := c.SetTables(want1); err != nil {
		t.Fatalf("SetTables: %v", err)
	}
	got, gen1, err := r.Tables()
	if err != nil || !reflect.DeepEqual(got, want1) {
		t.Fatalf("Tables = %+v, %v; want %+v", got, err, want1)
	}
	if _, again, _ := r.Tables(); again != gen1 {
		t.Fatalf("Tables generation changed without a publish: %d then %d", gen1, again)
	}
	want2 := sampleTables(3)
	if err := c.SetTables(want2); err != nil {
		t.Fatalf("second SetTables: %v", err)
	}
	got, gen2, err := r.Tables()
	if err != nil || !reflect.DeepEqual(got, want2) || gen2 == gen1 {
		t.Fatalf("Tables after republish = %+v, gen %d, %v; want %+v with a generation other than %d", got, gen2, err, want2, gen1)
	}
}

func TestSetTablesRefusesTooLarge(t *testing.T) {
	t.Parallel()
	c, _ := newCache(t, 1)
	small := sampleTables(1)
	if err := c.SetTables(small); err != nil {
		t.Fatal(err)
	}
	big := Tables{AppVersions: []row.AppVersion{{XMLDoc: strings.Repeat("y", TablesCapacity)}}}
	err := c.SetTables(big)
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("SetTables(%d-byte doc) error = %v, want one saying it exceeds the region", TablesCapacity, err)
	}
	if got, _, err := c.Tables(); err != nil || !reflect.DeepEqual(got, small) {
		t.Fatalf("Tables after a refused publish = %+v, %v; want the previous tables", got, err)
	}
}

// A feeder that died mid-publication leaves the sequence number odd; the next
// publication repairs it.
func TestSetTablesRepairsAbandonedPublication(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 1)
	atomic.StoreUint64(c.u64(hTablesSeq), 7)
	want := sampleTables(1)
	if err := c.SetTables(want); err != nil {
		t.Fatal(err)
	}
	got, _, err := openCache(t, path).Tables()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Tables = %+v, %v; want %+v", got, err, want)
	}
}

// Readers racing a publisher only ever see one whole version or the other.
func TestTablesNeverTorn(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 1)
	a, b := sampleTables(50), sampleTables(80)
	if err := c.SetTables(a); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if err := c.SetTables([]Tables{a, b}[i%2]); err != nil {
				t.Errorf("SetTables: %v", err)
				return
			}
		}
	}()
	r := openCache(t, path)
	for i := 0; i < 300; i++ {
		got, _, err := r.Tables()
		if err != nil {
			t.Errorf("Tables while publishing: %v", err)
			break
		}
		if n := len(got.AppVersions); n != 50 && n != 80 {
			t.Errorf("Tables returned %d app versions, want 50 or 80", n)
			break
		}
		if !reflect.DeepEqual(got, a) && !reflect.DeepEqual(got, b) {
			t.Errorf("Tables returned a mix of two publications")
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}
