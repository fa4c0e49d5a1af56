package taskctl_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// host show prints what the host has, its coprocessors with what plan
// classes test of them; host explain names them too.
func TestHostShow(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	user := storetest.User(t, b.st, storetest.UserOptions{}).ID
	coprocs := protocol.EncodeCoprocs([]protocol.Coproc{
		{Type: protocol.ResourceNVIDIA, Count: 2, Name: "NVIDIA GeForce RTX 3070", RAM: 8e9, PeakFlops: 2e13, DriverVersion: 53518,
			CUDAVersion: 12020, ComputeCapability: 806, HaveCUDA: true,
			OpenCL: &protocol.OpenCLProp{DeviceVersion: "OpenCL 3.0 CUDA", DoubleFPConfig: 63}},
		{Type: "miner_asic", Count: 1, PeakFlops: 1e11},
	})
	gpu := storetest.Host(t, b.st, storetest.HostOptions{CreateTime: 1, User: user, PNCPUs: 8, PFpops: 4e9, MNbytes: 16e9,
		OSName: "Linux Ubuntu", OSVersion: "6.5.0", PVendor: "GenuineIntel", PModel: "i7-8700", PFeatures: "sse2 avx2",
		ClientVersion: 72002, Coprocs: coprocs}).ID
	plain := storetest.Host(t, b.st, storetest.HostOptions{CreateTime: 1, User: user, PNCPUs: 1}).ID

	out := b.mustRun(t, "host", "show", "--host", strconv.FormatInt(gpu, 10))
	for _, want := range []string{"client 7.20.2", "CPU features: sse2 avx2", "NVIDIA", "NVIDIA GeForce RTX 3070", "CUDA 12020",
		"compute capability 8.6", "OpenCL 3.0 CUDA, double precision", "53518", "miner_asic", "20000"} {
		if !strings.Contains(out, want) {
			t.Errorf("host show lacks %q:\n%s", want, out)
		}
	}
	var js struct {
		Host struct {
			ID int64
		} `json:"host"`
		Coprocs []protocol.Coproc `json:"coprocs"`
	}
	out = b.mustRun(t, "host", "show", "--host", strconv.FormatInt(gpu, 10), "--json")
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Host.ID != gpu || len(js.Coprocs) != 2 ||
		js.Coprocs[0].ComputeCapability != 806 {
		t.Errorf("host show --json = %+v, %v\n%s", js, err, out)
	}
	if out := b.mustRun(t, "host", "show", "--host", strconv.FormatInt(plain, 10)); !strings.Contains(out, "coprocessors: none") ||
		!strings.Contains(out, "client version unknown") {
		t.Errorf("host show of a host without coprocessors:\n%s", out)
	}
	if _, _, err := b.run(t, "host", "show", "--host", "999999"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("host show of no host = %v, want not found", err)
	}
	out = b.mustRun(t, "host", "explain", "--host", strconv.FormatInt(gpu, 10), "--shm-path", t.TempDir()+"/none", "--platform", "x")
	if !strings.Contains(out, "coprocessors: 2 × NVIDIA (NVIDIA GeForce RTX 3070), 1 × miner_asic") {
		t.Errorf("host explain does not name the coprocessors:\n%s", out)
	}
}
