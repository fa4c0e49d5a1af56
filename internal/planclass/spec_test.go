package planclass

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
)

// realistic is a project's file in the shape BOINC projects write them.
const realistic = `<?xml version="1.0" encoding="ISO-8859-1"?>
<!-- a comment -->
<plan_classes>
  <plan_class>
    <name>cuda118</name>
    <gpu_type>nvidia</gpu_type>
    <cuda/>
    <min_cuda_version>11080</min_cuda_version>
    <min_nvidia_compcap>500</min_nvidia_compcap>
    <min_driver_version>52000</min_driver_version>
    <min_gpu_ram_mb>2048</min_gpu_ram_mb>
    <gpu_ram_used_mb>1500</gpu_ram_used_mb>
    <cpu_frac>0.05</cpu_frac>
    <gpu_peak_flops_scale>0.3</gpu_peak_flops_scale>
  </plan_class>
  <plan_class>
    <name>opencl_ati_101</name>
    <gpu_type>ati</gpu_type>
    <opencl/>
    <min_opencl_version>110</min_opencl_version>
    <min_gpu_ram_mb>1024</min_gpu_ram_mb>
    <ngpus>0.5</ngpus>
    <cpu_frac>0.2</cpu_frac>
    <need_amd_libs>1</need_amd_libs>
  </plan_class>
  <plan_class>
    <name>mt</name>
    <min_ncpus>2</min_ncpus>
    <max_threads>16</max_threads>
    <nthreads_cmdline/>
    <mem_usage_base_mb>256</mem_usage_base_mb>
    <mem_usage_per_cpu_mb>128</mem_usage_per_cpu_mb>
    <projected_flops_scale>0.9</projected_flops_scale>
  </plan_class>
  <plan_class>
    <name>avx2</name>
    <cpu_feature>avx2</cpu_feature>
    <cpu_feature>fma</cpu_feature>
    <os_regex>Linux|Ubuntu|Debian</os_regex>
    <cpu_vendor_regex>GenuineIntel|AuthenticAMD</cpu_vendor_regex>
    <projected_flops_scale>1.8</projected_flops_scale>
    <min_core_client_version>70000</min_core_client_version>
  </plan_class>
  <plan_class>
    <name>asic</name>
    <gpu_type>miner_asic</gpu_type>
    <cpu_frac>0.01</cpu_frac>
  </plan_class>
  <plan_class>
    <name>vbox64_mt</name>
    <virtualbox/>
    <is64bit/>
    <max_threads>4</max_threads>
    <min_vbox_version>60000</min_vbox_version>
  </plan_class>
</plan_classes>
`

func TestParseRealistic(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(realistic))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Names(), []string{"cuda118", "opencl_ati_101", "mt", "avx2", "asic", "vbox64_mt"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if !s.Has("mt") || s.Has("MT") || s.Has("") {
		t.Error("Has: wrong answer")
	}
	h := gpuHost()
	h.Coprocs[0].CUDAVersion = 11080 // exactly the minimum
	for _, tc := range []struct {
		class    string
		resource string
		avg      float64
		cmdline  string
	}{
		{"cuda118", protocol.ResourceNVIDIA, -1, ""},
		{"opencl_ati_101", protocol.ResourceAMD, -1, ""},
		{"mt", protocol.ResourceCPU, 8, "--memory_size_mb 1280 --nthreads 8"},
		{"avx2", protocol.ResourceCPU, 1, ""},
		{"asic", "miner_asic", -1, ""},
	} {
		u, err := s.Check(tc.class, h)
		if err != nil {
			t.Errorf("Check(%s): %v", tc.class, err)
			continue
		}
		if u.Resource != tc.resource || (tc.avg >= 0 && u.AvgNCPUs != tc.avg) || u.Cmdline != tc.cmdline {
			t.Errorf("Check(%s) = %+v, want resource %s, avg_ncpus %g, cmdline %q", tc.class, u, tc.resource, tc.avg, tc.cmdline)
		}
		if err := s.Supported(tc.class); err != nil {
			t.Errorf("Supported(%s) = %v", tc.class, err)
		}
	}
	if u, _ := s.Check("opencl_ati_101", h); u.GPUUsage != 0.5 {
		t.Errorf("opencl_ati_101 gpu usage %g, want 0.5", u.GPUUsage)
	}
	// A CPU-only host gets only the CPU classes.
	c := cpuHost()
	for _, name := range []string{"cuda118", "opencl_ati_101", "asic"} {
		if _, err := s.Check(name, c); !errors.Is(err, ErrRefused) {
			t.Errorf("CPU host: Check(%s) = %v, want refused", name, err)
		}
	}
	var r *Refusal
	if _, err := s.Check("vbox64_mt", h); !errors.As(err, &r) || r.Rule != "virtualbox" || !strings.Contains(r.Detail, "VirtualBox") {
		t.Errorf("Check(vbox64_mt) = %v, want refused by <virtualbox>", err)
	}
	if err := s.Supported("vbox64_mt"); !errors.As(err, &r) || r.Rule != "virtualbox" {
		t.Errorf("Supported(vbox64_mt) = %v, want the <virtualbox> refusal", err)
	}
	for name, want := range map[string]string{"cuda118": protocol.ResourceNVIDIA, "opencl_ati_101": protocol.ResourceAMD,
		"mt": protocol.ResourceCPU, "asic": "miner_asic", "nope": ""} {
		if got, ok := s.Resource(name); got != want || ok != (want != "") {
			t.Errorf("Resource(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if err := s.Supported("nope"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Supported(nope) = %v, want ErrUnknown", err)
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "plan_class_spec.xml")
	if err := os.WriteFile(path, []byte(realistic), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := ParseFile(path); err != nil || len(s.Names()) != 6 {
		t.Fatalf("ParseFile = %v, %v", s, err)
	}
	if err := os.WriteFile(path, []byte("<plan_classes><plan_class><name>a</name><bogus/></plan_class></plan_classes>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ParseFile of a bad file = %v, want an error naming the path", err)
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.xml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ParseFile(missing) = %v, want not-exist", err)
	}
}

// A mistake is an error that names the class and the element, never a
// class that quietly accepts more hosts.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"typo in an element", `<plan_classes><plan_class><name>cuda</name><gpu_type>nvidia</gpu_type><min_cuda_verison>11000</min_cuda_verison></plan_class></plan_classes>`,
			[]string{`"cuda"`, "<min_cuda_verison>"}},
		{"element before the name", `<plan_classes><plan_class><cpu_featur>avx</cpu_featur><name>avx</name></plan_class></plan_classes>`,
			[]string{`"avx"`, "<cpu_featur>"}},
		{"no name", `<plan_classes><plan_class><max_threads>2</max_threads></plan_class></plan_classes>`, []string{`"#1"`, "no <name>"}},
		{"duplicate", `<plan_classes><plan_class><name>a</name></plan_class><plan_class><name>a</name></plan_class></plan_classes>`,
			[]string{`"a"`, "defined twice"}},
		{"not a number", `<plan_classes><plan_class><name>mt</name><max_threads>four</max_threads></plan_class></plan_classes>`,
			[]string{`"mt"`, "<max_threads>four</max_threads>", "not an integer"}},
		{"bad bool", `<plan_classes><plan_class><name>c</name><gpu_type>nvidia</gpu_type><cuda>yes</cuda></plan_class></plan_classes>`,
			[]string{`"c"`, "<cuda>"}},
		{"bad regex", `<plan_classes><plan_class><name>r</name><os_regex>Linux(</os_regex></plan_class></plan_classes>`,
			[]string{`"r"`, "<os_regex>"}},
		{"perl regex", `<plan_classes><plan_class><name>r</name><cpu_model_regex>\d+</cpu_model_regex></plan_class></plan_classes>`,
			[]string{`"r"`, "<cpu_model_regex>"}},
		{"max_threads 0", `<plan_classes><plan_class><name>mt</name><max_threads>0</max_threads></plan_class></plan_classes>`,
			[]string{`"mt"`, "max_threads"}},
		{"cpu_frac above 1", `<plan_classes><plan_class><name>g</name><gpu_type>amd</gpu_type><cpu_frac>2</cpu_frac></plan_class></plan_classes>`,
			[]string{`"g"`, "cpu_frac"}},
		{"GPU rule without gpu_type", `<plan_classes><plan_class><name>g</name><min_gpu_ram_mb>100</min_gpu_ram_mb></plan_class></plan_classes>`,
			[]string{`"g"`, "<min_gpu_ram_mb> needs a <gpu_type>"}},
		{"negative ngpus without memory", `<plan_classes><plan_class><name>g</name><gpu_type>amd</gpu_type><ngpus>-1</ngpus></plan_class></plan_classes>`,
			[]string{`"g"`, "ngpus"}},
		{"nested element", `<plan_classes><plan_class><name>n</name><gpu_type><x/></gpu_type></plan_class></plan_classes>`,
			[]string{`"n"`, "<gpu_type>", "<x>"}},
		{"unknown top-level element", `<plan_classes><plan_clas><name>a</name></plan_clas></plan_classes>`, []string{"<plan_clas>"}},
		{"wrong root", `<plan_class><name>a</name></plan_class>`, []string{"<plan_classes>"}},
		{"empty", ``, []string{"<plan_classes>"}},
		{"broken XML", `<plan_classes><plan_class><name>a</name>`, []string{"plan class spec"}},
		{"every class's errors", `<plan_classes><plan_class><name>a</name><x1/></plan_class><plan_class><name>b</name><x2/></plan_class></plan_classes>`,
			[]string{`"a"`, "<x1>", `"b"`, "<x2>"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(strings.NewReader(tc.doc))
			if err == nil {
				t.Fatalf("Parse = %v, want an error", s.Names())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseBools(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(`<plan_classes>
<plan_class><name>on</name><gpu_type>nvidia</gpu_type><cuda>1</cuda></plan_class>
<plan_class><name>off</name><gpu_type>nvidia</gpu_type><cuda>0</cuda></plan_class>
<plan_class><name>empty</name><gpu_type>nvidia</gpu_type><cuda></cuda></plan_class>
</plan_classes>`))
	if err != nil {
		t.Fatal(err)
	}
	h := gpuHost()
	h.Coprocs[0].HaveCUDA = false
	for name, refused := range map[string]bool{"on": true, "off": false, "empty": true} {
		if _, err := s.Check(name, h); errors.Is(err, ErrRefused) != refused {
			t.Errorf("Check(%s) on a host without CUDA = %v, want refused %v", name, err, refused)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(realistic)
	f.Add(`<plan_classes><plan_class><name>a</name><ngpus>-1</ngpus><gpu_type>amd</gpu_type><gpu_ram_used_mb>1</gpu_ram_used_mb></plan_class></plan_classes>`)
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := Parse(strings.NewReader(doc))
		if err != nil {
			return
		}
		for _, name := range s.Names() {
			u, err := s.Check(name, gpuHost())
			if err == nil && (u.AvgNCPUs < 0 || u.GPUUsage < 0 || u.ProjectedFlops < 0 || u.ProjectedFlops != u.ProjectedFlops) {
				t.Errorf("class %s: usage %+v", name, u)
			}
		}
	})
}
