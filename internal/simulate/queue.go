package simulate

// wakeup is a host's next event time.
type wakeup struct {
	at   float64
	host int32
}

// wakeQueue is a binary min-heap of wake-ups ordered by time, then host
// index, so that hosts due at the same instant run in a fixed order and a
// run is reproducible. Each host has at most one entry.
type wakeQueue []wakeup

func (q wakeQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].host < q[j].host
}

func (q *wakeQueue) push(w wakeup) {
	*q = append(*q, w)
	h := *q
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop removes and returns the earliest wake-up; the queue must not be empty.
func (q *wakeQueue) pop() wakeup {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
