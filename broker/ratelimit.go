package broker

import (
	"sync"
	"time"

	"github.com/agentplane/agentplane/tool"
)

// maxExactWindow is the largest limit counted exactly (a sliding log of
// call times); larger limits use a fixed window, which may let up to twice
// the limit through across a window boundary.
const maxExactWindow = 4096

// limiter holds the per-user and per-tenant rate windows of a broker
// without a store (Options.Rates). They are not shared between processes
// and are lost on restart: a fleet of N workers would let up to N times a
// per-user limit through, which is why the platform passes its store. Per-run limits do
// not live here; they are counted from the run's log.
type limiter struct {
	mu    sync.Mutex
	w     map[string]*window
	takes int
}

type window struct {
	per  time.Duration
	last time.Time
	// times is the sliding log (limits up to maxExactWindow), oldest first.
	times []time.Time
	// start and count are the fixed window (larger limits).
	start time.Time
	count int
}

func newLimiter() *limiter { return &limiter{w: map[string]*window{}} }

// take checks every key against its limit at now and returns the index of
// the first that is exhausted, or -1. When all have room and charge is
// set, the call is counted in each. Check and charge are one step, so two
// concurrent calls cannot both take the last slot.
func (l *limiter) take(keys []string, limits []tool.RateLimit, now time.Time, charge bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := make([]*window, len(keys))
	for i, k := range keys {
		w := l.w[k]
		if w == nil {
			w = &window{per: limits[i].Per}
			if !charge {
				ws[i] = w // a throwaway: nothing to remember yet
				continue
			}
			l.w[k] = w
		}
		ws[i] = w
	}
	for i, w := range ws {
		if w.used(limits[i].N, now) >= limits[i].N {
			return i
		}
	}
	if !charge {
		return -1
	}
	for i, w := range ws {
		w.add(limits[i].N, now)
	}
	l.takes++
	if l.takes%1024 == 0 {
		l.sweep(now)
	}
	return -1
}

// used prunes and returns the calls counted in the window ending at now.
func (w *window) used(n int, now time.Time) int {
	if n > maxExactWindow {
		if now.Sub(w.start) >= w.per {
			w.start, w.count = now, 0
		}
		return w.count
	}
	cut := 0
	for cut < len(w.times) && !w.times[cut].After(now.Add(-w.per)) {
		cut++
	}
	w.times = w.times[cut:]
	return len(w.times)
}

func (w *window) add(n int, now time.Time) {
	w.last = now
	if n > maxExactWindow {
		w.count++
		return
	}
	w.times = append(w.times, now)
}

// sweep forgets windows with no call in their period.
func (l *limiter) sweep(now time.Time) {
	for k, w := range l.w {
		if now.Sub(w.last) > w.per {
			delete(l.w, k)
		}
	}
}
