package clientpolicy

import "math"

// DefaultActivityWindow is the time constant of Activity's average when
// it has none: BOINC's client averages its time statistics over ten days.
const DefaultActivityWindow = 10 * 86400.0

// Activity measures the active fraction of seed 000: the fraction of wall
// time the client runs and may compute, "continually updated", as the real
// client's time_stats do. It is an exponential average of the on/off
// record with time constant Window, starting from Prior before anything is
// observed. The work fetch needs the measured figure, not a configured
// one: a host that is off more than its owner said would otherwise fetch
// work it cannot finish by the deadlines.
type Activity struct {
	// Window is the average's time constant in seconds; 0 means
	// DefaultActivityWindow.
	Window float64
	// Prior is the fraction assumed before any observation; 0 means 1,
	// the real client's optimistic start.
	Prior float64

	frac    float64
	last    float64
	on      bool
	started bool
}

// Observe records that the host has been on (or off) since the previous
// call, up to now, and that it is on (or off) from now; the first call
// only starts the record.
func (a *Activity) Observe(now float64, on bool) {
	if !a.started {
		a.frac, a.last, a.on, a.started = a.prior(), now, on, true
		return
	}
	if dt := now - a.last; dt > 0 {
		a.frac = a.blend(dt)
		a.last = now
	}
	a.on = on
}

// Frac is the measured active fraction at now, in (0, 1]: the average
// brought up to now with the current state. It never returns 0, so the
// work fetch's rates stay finite for a host that has been off so far.
func (a *Activity) Frac(now float64) float64 {
	if !a.started {
		return a.prior()
	}
	f := a.frac
	if dt := now - a.last; dt > 0 {
		f = a.blend(dt)
	}
	return min(max(f, 0.01), 1)
}

func (a *Activity) blend(dt float64) float64 {
	w := 1 - math.Exp(-dt/a.window())
	x := 0.0
	if a.on {
		x = 1
	}
	return w*x + (1-w)*a.frac
}

func (a *Activity) window() float64 {
	if a.Window > 0 {
		return a.Window
	}
	return DefaultActivityWindow
}

func (a *Activity) prior() float64 {
	if a.Prior > 0 && a.Prior <= 1 {
		return a.Prior
	}
	return 1
}

// History feeds a the on/off record of a host that has been running for
// span seconds before now: it starts on (or off) at now - span, and
// period(on) draws the length of each on or off period. A simulated host
// that joins a run as an established volunteer then starts from what it
// would have measured, not from the prior of a new client. It ends with
// the host in state end at now.
func (a *Activity) History(now, span float64, start bool, period func(on bool) float64, end bool) {
	t, on := now-span, start
	a.Observe(t, on)
	for t < now {
		d := period(on)
		if !(d > 0) {
			break
		}
		t = min(t+d, now)
		on = !on
		a.Observe(t, on)
	}
	a.Observe(now, end)
}
