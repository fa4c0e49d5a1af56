package planclass

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// mega is BOINC's MEGA: the _mb elements are mebibytes.
const mega = 1 << 20

// Specs are the plan classes of one plan_class_spec.xml, by name. A nil
// *Specs has no class.
type Specs struct {
	classes map[string]*class
	order   []string
}

// class is one <plan_class>. Zero values mean "no such limit", as in BOINC;
// the defaults that are not zero are set by newClass.
type class struct {
	name string

	// unsupported is the first element that this server cannot evaluate,
	// and why; a class with one is refused to every host.
	unsupported, unsupportedWhy string

	userID int64

	cpuFeatures          []string // lower case
	minNCPUs             float64
	maxThreads           int
	memBase, memPerCPU   float64 // bytes
	nthreadsCmdline      bool
	projectedFlopsScale  float64
	osRegex              *regexp.Regexp
	cpuVendorRegex       *regexp.Regexp
	cpuModelRegex        *regexp.Regexp
	minOSVersion         float64
	maxOSVersion         float64
	minAndroidVersion    int
	maxAndroidVersion    int
	minLibcVersion       int
	avgNCPUs             float64
	minClient, maxClient int

	// GPU.
	gpuType            string // as written
	gpuTypeRegex       *regexp.Regexp
	cuda, cal, opencl  bool
	cpuFrac            float64
	minGPURAMMB        float64
	gpuRAMUsedMB       float64
	gpuPeakFlopsScale  float64
	ngpus              float64
	minGPUPeakFlops    float64
	maxGPUPeakFlops    float64
	minDriver          int
	maxDriver          int
	needATILibs        bool
	needAMDLibs        bool
	withoutOpenCL      bool
	minCALTarget       int
	maxCALTarget       int
	minCompcap         int
	maxCompcap         int
	minCUDA, maxCUDA   int
	minOpenCL          int
	maxOpenCL          int
	minOpenCLDriverRev int
	maxOpenCLDriverRev int
	doublePrecisionFP  bool
	minMetalSupport    int
	is64bit, nameIsSet bool
}

func newClass() *class {
	return &class{maxThreads: 1, projectedFlopsScale: 1, cpuFrac: 0.1, gpuPeakFlopsScale: 1, ngpus: 1}
}

// ParseFile reads a plan_class_spec.xml file.
func ParseFile(path string) (*Specs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a plan_class_spec.xml document: <plan_classes> holding
// <plan_class> elements. Every problem is reported, each naming its class
// and element.
func Parse(r io.Reader) (*Specs, error) {
	d := xml.NewDecoder(r)
	d.Strict = true
	// Files declaring encoding="ISO-8859-1" and the like are ASCII in
	// practice; their bytes are read as they are.
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	s := &Specs{classes: map[string]*class{}}
	var errs []error
	root := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("plan class spec: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch {
		case !root && se.Name.Local == "plan_classes":
			root = true
		case !root:
			return nil, fmt.Errorf("plan class spec: root element <%s>, want <plan_classes>", se.Name.Local)
		case se.Name.Local == "plan_class":
			c, err := parseClass(d, len(s.order)+1)
			if err != nil {
				var xe *xml.SyntaxError
				if errors.As(err, &xe) {
					return nil, err
				}
				errs = append(errs, err)
				continue
			}
			if _, dup := s.classes[c.name]; dup {
				errs = append(errs, fmt.Errorf("plan class %q: defined twice", c.name))
				continue
			}
			s.classes[c.name] = c
			s.order = append(s.order, c.name)
		default:
			errs = append(errs, fmt.Errorf("plan class spec: unknown element <%s> in <plan_classes> (want <plan_class>)", se.Name.Local))
			if err := d.Skip(); err != nil {
				return nil, fmt.Errorf("plan class spec: %w", err)
			}
		}
	}
	if !root {
		return nil, errors.New("plan class spec: no <plan_classes> element")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parseClass reads one <plan_class> up to its end tag. index (from 1)
// names a class whose <name> is missing.
func parseClass(d *xml.Decoder, index int) (*class, error) {
	c := newClass()
	var errs []error
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("plan class spec: %w", err)
		}
		switch t := tok.(type) {
		case xml.EndElement:
			label := c.name
			if !c.nameIsSet {
				label = fmt.Sprintf("#%d", index)
				errs = append([]error{errors.New("no <name>")}, errs...)
			}
			errs = append(errs, c.validate()...)
			if len(errs) > 0 {
				for i, e := range errs {
					errs[i] = fmt.Errorf("plan class %q: %w", label, e)
				}
				return nil, errors.Join(errs...)
			}
			return c, nil
		case xml.StartElement:
			text, err := elementText(d, t.Name.Local)
			if err != nil {
				var xe *xml.SyntaxError
				if errors.As(err, &xe) {
					return nil, err
				}
				errs = append(errs, err)
				continue
			}
			if err := c.set(t.Name.Local, text); err != nil {
				errs = append(errs, err)
			}
		}
	}
}

// elementText returns the text of a simple element whose start tag was
// just read.
func elementText(d *xml.Decoder, name string) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", fmt.Errorf("plan class spec: %w", err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			b.Write(t)
		case xml.EndElement:
			return strings.TrimSpace(b.String()), nil
		case xml.StartElement:
			if err := d.Skip(); err != nil {
				return "", err
			}
			if err := d.Skip(); err != nil {
				return "", err
			}
			return "", fmt.Errorf("<%s>: unexpected element <%s> inside it", name, t.Name.Local)
		}
	}
}

// unsupportedElements are BOINC elements this server reads but cannot
// evaluate: it does not have what they test. A class using one is never
// sent, rather than sent to hosts the operator meant to exclude.
var unsupportedElements = map[string]string{
	"virtualbox":                   "VirtualBox apps are not supported: this server does not read the client's VirtualBox version or VM extensions",
	"min_vbox_version":             "VirtualBox apps are not supported: this server does not read the client's VirtualBox version",
	"max_vbox_version":             "VirtualBox apps are not supported: this server does not read the client's VirtualBox version",
	"exclude_vbox_version":         "VirtualBox apps are not supported: this server does not read the client's VirtualBox version",
	"vm_accel_required":            "VirtualBox apps are not supported: this server does not read the client's VM extensions",
	"wsl":                          "WSL apps are not supported: this server does not read the client's WSL distributions",
	"docker":                       "Docker apps are not supported: this server does not read the client's Docker version",
	"min_boinc_wsl_distro_version": "WSL apps are not supported: this server does not read the client's WSL distributions",
	"project_prefs_tag":            "plan classes chosen by project preferences are not supported",
	"project_prefs_regex":          "plan classes chosen by project preferences are not supported",
	"project_prefs_default_true":   "plan classes chosen by project preferences are not supported",
	"infeasible_random":            "random refusals are not supported (the decision is deterministic)",
	"min_wu_id":                    "job-id ranges are not supported (a plan class is checked per host, not per job)",
	"max_wu_id":                    "job-id ranges are not supported (a plan class is checked per host, not per job)",
	"min_batch":                    "batch ranges are not supported (a plan class is checked per host, not per job)",
	"max_batch":                    "batch ranges are not supported (a plan class is checked per host, not per job)",
}

// set applies one element of a <plan_class>.
func (c *class) set(name, v string) error {
	if why, ok := unsupportedElements[name]; ok {
		if c.unsupported == "" {
			c.unsupported, c.unsupportedWhy = name, why
		}
		return nil
	}
	var err error
	switch name {
	case "name":
		c.name, c.nameIsSet = v, true
		if v == "" {
			return errors.New("<name> is empty")
		}
	case "user_id":
		var n int
		n, err = parseInt(v)
		c.userID = int64(n)
	case "cpu_feature":
		if v == "" {
			return errors.New("<cpu_feature> is empty")
		}
		c.cpuFeatures = append(c.cpuFeatures, strings.ToLower(v))
	case "min_ncpus":
		c.minNCPUs, err = parseFloat(v)
	case "max_threads":
		c.maxThreads, err = parseInt(v)
	case "mem_usage_base_mb":
		c.memBase, err = parseFloat(v)
		c.memBase *= mega
	case "mem_usage_per_cpu_mb":
		c.memPerCPU, err = parseFloat(v)
		c.memPerCPU *= mega
	case "nthreads_cmdline":
		c.nthreadsCmdline, err = parseBool(v)
	case "projected_flops_scale":
		c.projectedFlopsScale, err = parseFloat(v)
	case "os_regex":
		c.osRegex, err = parseRegex(v)
	case "cpu_vendor_regex":
		c.cpuVendorRegex, err = parseRegex(v)
	case "cpu_model_regex":
		c.cpuModelRegex, err = parseRegex(v)
	case "min_os_version":
		c.minOSVersion, err = parseFloat(v)
	case "max_os_version":
		c.maxOSVersion, err = parseFloat(v)
	case "min_android_version":
		c.minAndroidVersion, err = parseInt(v)
	case "max_android_version":
		c.maxAndroidVersion, err = parseInt(v)
	case "min_libc_version":
		c.minLibcVersion, err = parseInt(v)
	case "avg_ncpus":
		c.avgNCPUs, err = parseFloat(v)
	case "min_core_client_version":
		c.minClient, err = parseInt(v)
	case "max_core_client_version":
		c.maxClient, err = parseInt(v)
	case "is64bit":
		// Only VirtualBox classes read it in BOINC, and those are refused.
		c.is64bit, err = parseBool(v)
	case "gpu_type":
		c.gpuType = v
	case "gpu_type_regex":
		c.gpuTypeRegex, err = parseRegex(v)
	case "cuda":
		c.cuda, err = parseBool(v)
	case "cal":
		c.cal, err = parseBool(v)
	case "opencl":
		c.opencl, err = parseBool(v)
	case "cpu_frac":
		c.cpuFrac, err = parseFloat(v)
	case "min_gpu_ram_mb":
		c.minGPURAMMB, err = parseFloat(v)
	case "gpu_ram_used_mb":
		c.gpuRAMUsedMB, err = parseFloat(v)
	case "gpu_peak_flops_scale":
		c.gpuPeakFlopsScale, err = parseFloat(v)
	case "ngpus":
		c.ngpus, err = parseFloat(v)
	case "min_gpu_peak_flops":
		c.minGPUPeakFlops, err = parseFloat(v)
	case "max_gpu_peak_flops":
		c.maxGPUPeakFlops, err = parseFloat(v)
	case "min_driver_version":
		c.minDriver, err = parseInt(v)
	case "max_driver_version":
		c.maxDriver, err = parseInt(v)
	case "gpu_utilization_tag":
		// A volunteer's gpu_utilization preference scales gpu_usage in
		// BOINC; without it the factor is 1, which is what is used here.
	case "need_ati_libs":
		c.needATILibs, err = parseBool(v)
	case "need_amd_libs":
		c.needAMDLibs, err = parseBool(v)
	case "without_opencl":
		c.withoutOpenCL, err = parseBool(v)
	case "min_cal_target":
		c.minCALTarget, err = parseInt(v)
	case "max_cal_target":
		c.maxCALTarget, err = parseInt(v)
	case "min_nvidia_compcap":
		c.minCompcap, err = parseInt(v)
	case "max_nvidia_compcap":
		c.maxCompcap, err = parseInt(v)
	case "min_cuda_version":
		c.minCUDA, err = parseInt(v)
	case "max_cuda_version":
		c.maxCUDA, err = parseInt(v)
	case "min_opencl_version":
		c.minOpenCL, err = parseInt(v)
	case "max_opencl_version":
		c.maxOpenCL, err = parseInt(v)
	case "min_opencl_driver_revision":
		c.minOpenCLDriverRev, err = parseInt(v)
	case "max_opencl_driver_revision":
		c.maxOpenCLDriverRev, err = parseInt(v)
	case "double_precision_fp":
		c.doublePrecisionFP, err = parseBool(v)
	case "min_metal_support":
		c.minMetalSupport, err = parseInt(v)
	default:
		return fmt.Errorf("unknown element <%s>", name)
	}
	if err != nil {
		return fmt.Errorf("<%s>%s</%s>: %w", name, v, name, err)
	}
	return nil
}

// validate reports values that would make nonsense of the usage
// computed from them.
func (c *class) validate() []error {
	var errs []error
	if c.maxThreads < 1 {
		errs = append(errs, fmt.Errorf("<max_threads> %d: want at least 1", c.maxThreads))
	}
	if c.minNCPUs < 0 || c.avgNCPUs < 0 {
		errs = append(errs, errors.New("<min_ncpus> and <avg_ncpus> must not be negative"))
	}
	if c.memBase < 0 || c.memPerCPU < 0 {
		errs = append(errs, errors.New("<mem_usage_base_mb> and <mem_usage_per_cpu_mb> must not be negative"))
	}
	if !(c.projectedFlopsScale > 0) || !(c.gpuPeakFlopsScale > 0) {
		errs = append(errs, errors.New("<projected_flops_scale> and <gpu_peak_flops_scale> must be above 0"))
	}
	if !(c.cpuFrac >= 0 && c.cpuFrac <= 1) {
		errs = append(errs, fmt.Errorf("<cpu_frac> %g: want 0..1", c.cpuFrac))
	}
	if c.minGPURAMMB < 0 || c.gpuRAMUsedMB < 0 {
		errs = append(errs, errors.New("<min_gpu_ram_mb> and <gpu_ram_used_mb> must not be negative"))
	}
	if c.ngpus < 0 && c.gpuRAMUsedMB == 0 && c.minGPURAMMB == 0 {
		errs = append(errs, errors.New("<ngpus> below 0 fills a GPU's memory with tasks: give <gpu_ram_used_mb> or <min_gpu_ram_mb>"))
	}
	gpu := c.gpuType != "" || c.gpuTypeRegex != nil
	if !gpu {
		for _, e := range []struct {
			name string
			set  bool
		}{
			{"cuda", c.cuda}, {"cal", c.cal}, {"min_gpu_ram_mb", c.minGPURAMMB != 0}, {"gpu_ram_used_mb", c.gpuRAMUsedMB != 0},
			{"min_driver_version", c.minDriver != 0}, {"max_driver_version", c.maxDriver != 0},
			{"min_nvidia_compcap", c.minCompcap != 0}, {"max_nvidia_compcap", c.maxCompcap != 0},
			{"min_cuda_version", c.minCUDA != 0}, {"max_cuda_version", c.maxCUDA != 0},
			{"need_ati_libs", c.needATILibs}, {"need_amd_libs", c.needAMDLibs},
		} {
			if e.set {
				errs = append(errs, fmt.Errorf("<%s> needs a <gpu_type>", e.name))
			}
		}
	}
	return errs
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	return n, nil
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != f {
		return 0, errors.New("not a number")
	}
	return f, nil
}

// parseBool reads a flag as BOINC writes them: <x/> or <x>1</x> is true,
// <x>0</x> false.
func parseBool(v string) (bool, error) {
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("want 0 or 1")
	}
	return b, nil
}

func parseRegex(v string) (*regexp.Regexp, error) {
	re, err := regexp.CompilePOSIX(v)
	if err != nil {
		return nil, fmt.Errorf("not a POSIX extended regular expression: %w", err)
	}
	return re, nil
}

// Has reports whether the file defines a class of that name.
func (s *Specs) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.classes[name]
	return ok
}

// Names returns the classes' names in the file's order.
func (s *Specs) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.order)
}

// Supported returns nil when the class is defined and this server can
// evaluate all of it; else an error wrapping ErrUnknown, or a *Refusal
// naming the element it cannot evaluate (such a class is refused to every
// host).
func (s *Specs) Supported(name string) error {
	c, err := s.lookup(name)
	if err != nil {
		return err
	}
	if c.unsupported != "" {
		return &Refusal{Class: name, Rule: c.unsupported, Detail: c.unsupportedWhy}
	}
	return nil
}

func (s *Specs) lookup(name string) (*class, error) {
	if s != nil {
		if c, ok := s.classes[name]; ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrUnknown, name)
}

// DefaultFile is the file's name in the project directory, as BOINC's.
const DefaultFile = "plan_class_spec.xml"

// Load reads the file at path. When required is false a missing file is
// no classes (nil, nil): a project without plan classes needs no file,
// but one named explicitly must exist.
func Load(path string, required bool) (*Specs, error) {
	s, err := ParseFile(path)
	if errors.Is(err, os.ErrNotExist) && !required {
		return nil, nil
	}
	return s, err
}

// Resource returns the resource a version of class name uses on any host
// (protocol.ResourceCPU, a GPU vendor's, or an other coprocessor's type),
// for what can be known without a host, such as a reply's <no_rsc_apps>.
// ok is false for an unknown class, and for a class with a gpu_type_regex,
// whose resource depends on the host.
func (s *Specs) Resource(name string) (resource string, ok bool) {
	c, err := s.lookup(name)
	if err != nil {
		return "", false
	}
	switch {
	case vendorOf(c.gpuType) != "":
		return vendorOf(c.gpuType), true
	case c.gpuTypeRegex != nil:
		return "", false
	case c.gpuType != "":
		return c.gpuType, true
	}
	return protocol.ResourceCPU, true
}
