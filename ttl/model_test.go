package ttl

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"testing"
)

// This file holds the reference model that FuzzWheel and TestWheelModel drive the wheel
// against, and an invariant checker of the wheel's internals.

// opReader turns fuzz bytes into operations; it yields zeros once exhausted.
type opReader struct{ b []byte }

func (r *opReader) empty() bool { return len(r.b) == 0 }

func (r *opReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *opReader) uint(n int) uint64 {
	var buf [8]byte
	k := copy(buf[:n], r.b)
	r.b = r.b[k:]
	return binary.LittleEndian.Uint64(buf[:])
}

const tenYearsMs = 10 * 365 * 24 * 3600 * 1000

// interesting distances: level boundaries (64^k - 1, 64^k), the wheel span (2^48), ten years.
var boundaries = []int64{
	0, 1, 63, 64, 65, 4095, 4096, 4097, 262143, 262144, 262145,
	1<<24 - 1, 1 << 24, 1<<30 - 1, 1 << 30, 1<<36 - 1, 1 << 36, 1<<42 - 1, 1 << 42,
	1<<48 - 1, 1 << 48, 1<<48 + 1, 1 << 54, tenYearsMs,
}

var extremes = []int64{
	math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 63, math.MaxInt64 - 1<<48,
	math.MinInt64, math.MinInt64 + 1, math.MinInt64 + 1<<48, -1, 0, 1, 1<<48 - 1, 1 << 48,
	1_750_000_000_000, // around now in unix ms
}

func satAdd(a, b int64) int64 {
	c := a + b
	if b > 0 && c < a {
		return math.MaxInt64
	}
	if b < 0 && c > a {
		return math.MinInt64
	}
	return c
}

func small(r *opReader) int64 { return int64(int8(r.byte())) % 3 } // -2..2

func genDeadline(r *opReader, now int64) int64 {
	switch r.byte() % 8 {
	case 0:
		return satAdd(now, int64(int8(r.byte()))) // also in the past
	case 1:
		return satAdd(now, boundaries[int(r.byte())%len(boundaries)]+small(r))
	case 2:
		return satAdd(now, int64(r.uint(2)))
	case 3:
		return satAdd(now, int64(r.uint(4)))
	case 4:
		return satAdd(now, int64(r.uint(8)%tenYearsMs))
	case 5:
		return extremes[int(r.byte())%len(extremes)]
	case 6:
		return int64(r.uint(8))
	default: // around the next 2^48 ms epoch boundary
		e := now>>wheelBits + 1
		if e > math.MaxInt64>>wheelBits {
			return math.MaxInt64
		}
		return satAdd(e<<wheelBits, int64(int8(r.byte())))
	}
}

type wheelModel struct {
	tb     testing.TB
	w      *Wheel
	now    int64 // the wheel's time
	timers []Timer
	index  map[*Timer]int
	sched  map[int]int64 // scheduled timers and their deadlines
	dirty  bool          // a scheduled timer was removed or rescheduled: NextDeadline may be early
}

const modelTimers = 24

func newWheelModel(tb testing.TB, start int64) *wheelModel {
	m := &wheelModel{
		tb:     tb,
		w:      NewWheel(start),
		now:    start,
		timers: make([]Timer, modelTimers),
		index:  make(map[*Timer]int),
		sched:  make(map[int]int64),
	}
	for i := range m.timers {
		m.index[&m.timers[i]] = i
	}
	return m
}

func (m *wheelModel) add(i int, d int64) {
	if _, ok := m.sched[i]; ok {
		m.dirty = true
	}
	m.timers[i].Deadline = d
	m.w.Add(&m.timers[i])
	m.sched[i] = d
}

func (m *wheelModel) remove(i int) {
	_, want := m.sched[i]
	if got := m.w.Remove(&m.timers[i]); got != want {
		m.tb.Fatalf("Remove(timer %d) = %v, want %v", i, got, want)
	}
	if want {
		m.dirty = true
	}
	delete(m.sched, i)
}

func (m *wheelModel) min() (int64, bool) {
	if len(m.sched) == 0 {
		return 0, false
	}
	mn := int64(math.MaxInt64)
	for _, d := range m.sched {
		mn = min(mn, d)
	}
	return mn, true
}

// advance calls Advance(to) and checks the fired set against the model. act, if not nil,
// runs inside fire after the model has accounted for the fired timer.
func (m *wheelModel) advance(to int64, act func(fired int, pending map[int]bool)) (fired int) {
	u := max(to, m.now)
	pending := make(map[int]bool)
	for i, d := range m.sched {
		if d <= u {
			pending[i] = true
		}
	}
	last, inWheel := int64(math.MinInt64), false
	m.w.Advance(to, func(t *Timer) {
		i, ok := m.index[t]
		if !ok {
			m.tb.Fatalf("fired unknown timer %p", t)
		}
		if !pending[i] {
			m.tb.Fatalf("Advance(%d) from %d fired timer %d (deadline %d, model deadline %d, scheduled %v): not due or fired twice",
				to, m.now, i, t.Deadline, m.sched[i], m.sched[i] != 0)
		}
		if t.Scheduled() {
			m.tb.Fatalf("timer %d still scheduled inside fire", i)
		}
		if t.Deadline != m.sched[i] {
			m.tb.Fatalf("timer %d fired with deadline %d, model %d", i, t.Deadline, m.sched[i])
		}
		d := t.Deadline
		if d > m.now { // past the due list: non-decreasing order
			if inWheel && d < last {
				m.tb.Fatalf("Advance(%d): timer %d (deadline %d) fired after deadline %d", to, i, d, last)
			}
			inWheel, last = true, d
		} else if inWheel {
			m.tb.Fatalf("Advance(%d): past-due timer %d (deadline %d) fired after a later one", to, i, d)
		}
		delete(pending, i)
		delete(m.sched, i)
		fired++
		if act != nil {
			act(i, pending)
		}
	})
	if len(pending) > 0 {
		m.tb.Fatalf("Advance(%d) from %d did not fire %d due timers: %v", to, m.now, len(pending), pending)
	}
	m.now = u
	return fired
}

// check compares Len and NextDeadline with the model and verifies the wheel's internals.
func (m *wheelModel) check() {
	if got, want := m.w.Len(), len(m.sched); got != want {
		m.tb.Fatalf("Len = %d, want %d", got, want)
	}
	nd, ok := m.w.NextDeadline()
	mn, wantOK := m.min()
	if ok != wantOK {
		m.tb.Fatalf("NextDeadline ok = %v, want %v", ok, wantOK)
	}
	if ok && nd > mn {
		m.tb.Fatalf("NextDeadline = %d, later than the earliest deadline %d", nd, mn)
	}
	if ok && !m.dirty && nd != mn {
		m.tb.Fatalf("NextDeadline = %d, want exactly %d (nothing was removed)", nd, mn)
	}
	checkInvariants(m.tb, m.w)
}

// sleepStep does what a scheduler does: Advance to NextDeadline. If nothing fires, the
// wake-up was early (a removed timer), and NextDeadline must now be exact.
func (m *wheelModel) sleepStep() {
	nd, ok := m.w.NextDeadline()
	if !ok {
		return
	}
	if m.advance(nd, nil) > 0 {
		return
	}
	nd2, ok := m.w.NextDeadline()
	mn, _ := m.min()
	if !ok || nd2 != mn {
		m.tb.Fatalf("after an empty wake-up at %d, NextDeadline = %d, %v; want exactly %d", nd, nd2, ok, mn)
	}
}

func (m *wheelModel) genAdvance(r *opReader) int64 {
	switch r.byte() % 8 {
	case 0:
		return m.now
	case 1:
		return satAdd(m.now, int64(r.byte()))
	case 2:
		return satAdd(m.now, int64(r.uint(2)))
	case 3:
		return satAdd(m.now, boundaries[int(r.byte())%len(boundaries)]+small(r))
	case 4:
		return satAdd(m.now, int64(r.uint(4)<<(r.byte()%32)))
	case 5: // exactly at (or next to) a scheduled deadline
		i := int(r.byte()) % modelTimers
		if d, ok := m.sched[i]; ok {
			return satAdd(d, small(r))
		}
		return m.now
	case 6:
		if r.byte()%2 == 0 {
			return satAdd(m.now, -int64(r.uint(2))) // earlier than the wheel's time
		}
		return extremes[int(r.byte())%len(extremes)]
	default:
		return satAdd(m.now, int64(r.uint(8)%tenYearsMs))
	}
}

// runWheelModel interprets ops against the wheel and the model.
func runWheelModel(tb testing.TB, start int64, ops []byte) {
	m := newWheelModel(tb, start)
	r := &opReader{b: ops}
	for !r.empty() {
		switch r.byte() % 8 {
		case 0, 1:
			i := int(r.byte()) % modelTimers
			m.add(i, genDeadline(r, m.now))
		case 2:
			m.remove(int(r.byte()) % modelTimers)
		case 3, 4:
			to := m.genAdvance(r)
			u := max(to, m.now)
			m.advance(to, func(fired int, pending map[int]bool) {
				// fire may re-add the fired timer, and add or remove others.
				switch a := r.byte(); a % 4 {
				case 1:
					m.add(fired, genDeadline(r, u))
				case 2:
					j := int(r.byte()) % modelTimers
					delete(pending, j)
					m.remove(j)
				case 3:
					j := int(r.byte()) % modelTimers
					delete(pending, j)
					m.add(j, genDeadline(r, u))
				}
			})
		case 5:
			m.sleepStep()
		case 6:
			// Drain like a scheduler would, bounded.
			for k := 0; k < 4 && len(m.sched) > 0; k++ {
				m.sleepStep()
			}
		case 7:
			m.advance(satAdd(m.now, int64(r.byte()%8)), nil)
		}
		m.check()
	}
	// Everything left fires by the end of time.
	m.advance(math.MaxInt64, nil)
	m.check()
}

// checkInvariants verifies the wheel's internal structure.
func checkInvariants(tb testing.TB, w *Wheel) {
	n := 0
	walk := func(l *timerList, what string, each func(t *Timer, d uint64)) {
		var prev *Timer
		for t := l.head; t != nil; t = t.next {
			if t.list != l || t.prev != prev {
				tb.Fatalf("%s: broken links", what)
			}
			d := key(t.Deadline)
			if d < l.min {
				tb.Fatalf("%s: deadline %d below the list's lower bound %d", what, t.Deadline, unkey(l.min))
			}
			each(t, d)
			prev = t
			n++
		}
		if l.tail != prev {
			tb.Fatalf("%s: bad tail", what)
		}
	}
	// Walk the occupied slots only (a timer stranded in a slot whose bit is clear shows
	// up as a count mismatch with Len).
	for level := range numLevels {
		for occ := w.occ[level]; occ != 0; occ &= occ - 1 {
			slot := bits.TrailingZeros64(occ)
			l := &w.slots[level][slot]
			if l.head == nil {
				tb.Fatalf("slot %d/%d: occupancy bit set, list empty", level, slot)
			}
			walk(l, "slot", func(t *Timer, d uint64) {
				if d <= w.now {
					tb.Fatalf("slot %d/%d holds deadline %d, not after the wheel's time %d", level, slot, t.Deadline, unkey(w.now))
				}
				lv := (bits.Len64(d^w.now) - 1) / slotBits
				sl := int(d>>(lv*slotBits)) & slotMask
				if lv >= numLevels {
					lv, sl = lastLevel, overflowSlot
				}
				if lv != level || sl != slot {
					tb.Fatalf("deadline %d (wheel time %d) in slot %d/%d, want %d/%d", t.Deadline, unkey(w.now), level, slot, lv, sl)
				}
			})
		}
	}
	walk(&w.due, "due", func(t *Timer, d uint64) {
		if d > w.now {
			tb.Fatalf("due list holds deadline %d after the wheel's time %d", t.Deadline, unkey(w.now))
		}
	})
	if w.firing.head != nil {
		tb.Fatalf("firing list not empty outside Advance")
	}
	if n != w.n {
		tb.Fatalf("wheel holds %d timers, Len = %d", n, w.n)
	}
}

// seedCorpus holds op streams worth starting the fuzzer (and TestWheelModel) from.
func seedCorpus() []struct {
	start int64
	ops   []byte
} {
	le := func(v uint64, n int) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, v)
		return b[:n]
	}
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	return []struct {
		start int64
		ops   []byte
	}{
		// add at every level boundary, then drain by sleeping.
		{1_750_000_000_000, cat(
			[]byte{0, 0, 1, 1, 2}, []byte{0, 1, 1, 3, 0}, []byte{0, 2, 1, 4, 2}, []byte{0, 3, 1, 9, 0},
			[]byte{0, 4, 1, 10, 0}, []byte{0, 5, 1, 19, 1}, []byte{0, 6, 1, 23, 0}, []byte{6, 6, 6, 6, 6})},
		// past deadline, same-ms deadlines, remove, advance exactly to a deadline.
		{0, cat([]byte{0, 0, 0, 0xf0, 0, 1, 0, 5, 0, 2, 0, 5, 2, 1, 3, 5, 2, 0, 5, 3, 0, 0})},
		// far and extreme deadlines, then a jump to the end of time.
		{-5, cat([]byte{0, 0, 5, 0, 0, 1, 5, 4, 0, 2, 4}, le(1<<62, 8), []byte{0, 3, 7, 3, 3, 6, 1, 0})},
		// epoch boundary crossing with re-adds inside fire.
		{1<<48 - 10, cat([]byte{0, 0, 7, 5, 0, 1, 0, 20, 4, 1, 1, 0, 1, 5, 6, 6})},
		// huge random jumps.
		{math.MinInt64, cat([]byte{0, 0, 6}, le(0x8000_0000_0000_1234, 8), []byte{0, 1, 4}, le(12345678901, 8),
			[]byte{3, 4}, le(0xffffffff, 4), []byte{17, 3, 7}, le(99999999999, 8), []byte{0, 5, 5, 5})},
	}
}
