package projectprefs

import (
	"slices"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// Refusal is why a volunteer's preferences refuse to send a job with an
// app version for a resource; Allowed is none.
type Refusal int

const (
	// Allowed: the preferences allow the send.
	Allowed Refusal = iota
	// NotSelected: the volunteer selected other apps, and this is the
	// first pass (see Pass).
	NotSelected
	// Beta: the app or the version is a beta and the volunteer did not opt
	// in to beta work.
	Beta
	// ResourceOff: the version runs on a resource the volunteer does not
	// want used.
	ResourceOff
)

// Pass is which apps a walk over the available work may send. A scheduler
// walks the work with FirstPass; when that sent nothing and OtherAppsPass
// says so, it walks again with OtherApps, as BOINC does (sched_array.cpp:
// the non-selected apps are scanned only when no job was sent).
type Pass int

const (
	// FirstPass sends only the selected apps (every app when none is
	// selected).
	FirstPass Pass = iota
	// OtherApps sends any app: the selected ones had no work for the host
	// and the volunteer accepts others.
	OtherApps
)

// OtherAppsPass reports whether a walk that sent nothing in its first pass
// should walk again with OtherApps: the volunteer selected apps and
// accepts others when those have no work.
func (p Prefs) OtherAppsPass() bool { return len(p.Apps) > 0 && p.AllowNonSelected }

// Selected reports whether the volunteer runs app appID in a first pass:
// they selected it, or selected none.
func (p Prefs) Selected(appID int64) bool {
	return len(p.Apps) == 0 || slices.Contains(p.Apps, appID)
}

// Uses reports whether the volunteer lets the project use resource
// (protocol.ResourceCPU, a GPU type, or an "other" coprocessor's type). A
// resource that is refused is neither asked of the client (it reads the
// same preferences from the reply) nor sent work.
func (p Prefs) Uses(resource string) bool {
	if p.NoGPUs && resource != protocol.ResourceCPU {
		return false
	}
	return !slices.Contains(p.NoResource, resource)
}

// Check decides whether a job of app, run with version av on resource, may
// be sent in pass.
func (p Prefs) Check(app row.App, av row.AppVersion, resource string, pass Pass) Refusal {
	switch {
	case pass == FirstPass && !p.Selected(app.ID):
		return NotSelected
	case (app.Beta || av.Beta) && !p.AllowBeta:
		return Beta
	case !p.Uses(resource):
		return ResourceOff
	}
	return Allowed
}

// CPUs is how many of a host's ncpus count for limits scaled by CPUs: no
// more than MaxCPUs when the volunteer set it, and at least one.
func (p Prefs) CPUs(ncpus int) int {
	if p.MaxCPUs > 0 && ncpus > p.MaxCPUs {
		ncpus = p.MaxCPUs
	}
	return max(ncpus, 1)
}
