// Package hostav is a stand-in for h-hostav's package of the same name,
// with its announced API, so that the scheduler can be written before it
// lands. The merge of h-hostav replaces this file.
package hostav

import "github.com/taskserver/taskserver/internal/row"

// MinSamples is how many valid results make a host's own rate trusted.
const MinSamples = 10

// Source says where a rate comes from.
type Source int

// Sources of a rate.
const (
	SourceHost Source = iota
	SourceProjected
	SourceBenchmark
)

// Rate is the host's processing rate for a version.
func Rate(st row.HostAppVersion, projected, benchmark float64) (float64, Source) {
	if st.EtN >= MinSamples && st.EtAvg > 0 {
		return 1 / st.EtAvg, SourceHost
	}
	if projected > 0 {
		return projected, SourceProjected
	}
	return benchmark, SourceBenchmark
}

// GeneralizedID is the host_app_version id of an anonymous-platform
// client's own build of an app for a resource.
func GeneralizedID(appID int64, resource string) int64 {
	n := map[string]int64{"CPU": 0, "NVIDIA": 1, "ATI": 2, "intel_gpu": 3, "apple_gpu": 4}[resource]
	return -(appID*1000000 + n)
}
