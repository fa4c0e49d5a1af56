package planclass

import (
	"strconv"
	"strings"
)

// leadingInts reads up to n unsigned integers separated by sep from the
// start of s, stopping at the first thing that is not one.
func leadingInts(s string, sep byte, n int) []int {
	var out []int
	for len(out) < n {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			break
		}
		v, err := strconv.Atoi(s[:i])
		if err != nil {
			break
		}
		out = append(out, v)
		if i == len(s) || s[i] != sep {
			break
		}
		s = s[i+1:]
	}
	return out
}

// osVersionNum is BOINC's numeric OS version, for min_os_version and
// max_os_version: Darwin, Android and Linux kernels a.b.c as
// 10000a+100b+c, Windows "(a.b.c.d)" as 100000000a+1000000b+100c+d; 0 if
// unknown.
func osVersionNum(osName, osVersion string) float64 {
	switch {
	case strings.Contains(osName, "Darwin"), strings.Contains(osName, "Android"):
		if v := leadingInts(osVersion, '.', 3); len(v) == 3 {
			return 10000*float64(v[0]) + 100*float64(v[1]) + float64(v[2])
		}
	case strings.Contains(osName, "Windows"):
		if i := strings.LastIndexByte(osVersion, '('); i >= 0 {
			if v := leadingInts(osVersion[i+1:], '.', 4); len(v) == 4 {
				return 100000000*float64(v[0]) + 1000000*float64(v[1]) + 100*float64(v[2]) + float64(v[3])
			}
		}
	case strings.Contains(osName, "Linux"):
		// "Ubuntu 22.04.3 LTS [6.5.0-14-generic|libc 2.35]" or a bare
		// kernel version.
		s := osVersion
		if i := strings.IndexByte(s, '['); i >= 0 {
			s = s[i+1:]
		}
		if v := leadingInts(s, '.', 3); len(v) == 3 {
			return 10000*float64(v[0]) + 100*float64(v[1]) + float64(v[2])
		}
	}
	return 0
}

// libcVersion reads "|libc 2.35" in a Linux os_version as 235; 0 if
// absent.
func libcVersion(osVersion string) int {
	i := strings.Index(osVersion, "|libc ")
	if i < 0 {
		return 0
	}
	if v := leadingInts(osVersion[i+len("|libc "):], '.', 2); len(v) == 2 {
		return v[0]*100 + v[1]
	}
	return 0
}

// androidVersion reads "(Android 4.3.1)" as 40301; 0 if absent.
func androidVersion(osVersion string) int {
	i := strings.Index(osVersion, "(Android ")
	if i < 0 {
		return 0
	}
	v := leadingInts(osVersion[i+len("(Android "):], '.', 3)
	n := 0
	for j, mul := range []int{10000, 100, 1} {
		if j < len(v) {
			n += v[j] * mul
		}
	}
	return n
}

// openCLVersion reads "OpenCL 1.2 CUDA" as 102 (BOINC's
// opencl_device_version_int); 0 if it does not parse.
func openCLVersion(s string) int {
	rest, ok := strings.CutPrefix(s, "OpenCL ")
	if !ok {
		return 0
	}
	if v := leadingInts(rest, '.', 2); len(v) == 2 {
		return 100*v[0] + v[1]
	}
	return 0
}

// openCLDriverRevision reads the runtime revision AMD puts in the device
// version, "OpenCL 1.2 AMD-APP (1800.11)", as 180011; 0 if absent.
func openCLDriverRevision(s string) int {
	i := strings.LastIndexByte(s, '(')
	if i < 0 {
		return 0
	}
	f := s[i+1:]
	if j := strings.IndexFunc(f, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') }); j >= 0 {
		f = f[:j]
	}
	rev, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0
	}
	return int(rev*100 + 0.5)
}
