package protocol

import (
	"reflect"
	"strings"
	"testing"
)

// The stored text leaves out the work asked, does not depend on the order
// the client listed other coprocessors in, and reads back as it was.
func TestEncodeCoprocs(t *testing.T) {
	t.Parallel()
	nv := Coproc{Type: ResourceNVIDIA, Count: 1, Name: "RTX", PeakFlops: 1e13, RAM: 8e9, DriverVersion: 53518, HaveCUDA: true,
		OpenCL: &OpenCLProp{DeviceVersion: "OpenCL 3.0 CUDA", GlobalMemSize: 8 << 30}, CoprocRequest: CoprocRequest{ReqSecs: 100}}
	a := Coproc{Type: "asic_a", Count: 1, CoprocRequest: CoprocRequest{ReqSecs: 5, ReqInstances: 1}}
	b := Coproc{Type: "asic_b", Count: 2}
	one := EncodeCoprocs([]Coproc{b, nv, a})
	nv.ReqSecs, a.ReqSecs, a.ReqInstances, a.EstimatedDelay = 7, 0, 0, 3
	two := EncodeCoprocs([]Coproc{nv, a, b})
	if one != two {
		t.Fatalf("same hardware, different text:\n%s\n%s", one, two)
	}
	if strings.Contains(one, "ReqSecs") || strings.Contains(one, "EstimatedDelay") {
		t.Errorf("stored text %s has the request's asks", one)
	}
	got, err := DecodeCoprocs(one)
	nv.ReqSecs, a.EstimatedDelay = 0, 0
	if err != nil || !reflect.DeepEqual(got, []Coproc{nv, a, b}) {
		t.Errorf("DecodeCoprocs = %+v, %v; want NVIDIA, asic_a, asic_b as encoded", got, err)
	}
	if EncodeCoprocs(nil) != "" {
		t.Error("no coprocessor: want \"\"")
	}
	if cs, err := DecodeCoprocs(""); cs != nil || err != nil {
		t.Errorf("DecodeCoprocs(\"\") = %v, %v", cs, err)
	}
	if _, err := DecodeCoprocs("{"); err == nil {
		t.Error("DecodeCoprocs(bad) = nil error")
	}
}
