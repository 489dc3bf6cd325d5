package ttl

import (
	"math"
	"math/bits"
)

const (
	slotBits  = 6
	numSlots  = 1 << slotBits // slots per level
	slotMask  = numSlots - 1
	numLevels = 8
	// wheelBits is the span of the wheel in bits of milliseconds: 2^48 ms, ~8,900 years.
	wheelBits = slotBits * numLevels
	lastLevel = numLevels - 1
	// overflowSlot of the last level holds the timers whose deadlines differ from the
	// wheel's time above wheelBits. Normal timers of the last level never use it: their
	// digit there is greater than the wheel's, which is >= 0.
	overflowSlot = 0
	// noLevel marks the due and firing lists, which are not slots.
	noLevel = 0xff
)

// Timer is an intrusive timer node: embed it in the item that expires. The zero value is
// ready to use. A Timer is scheduled in at most one Wheel at a time; while it is scheduled
// the wheel owns its links and the caller must not change Deadline.
type Timer struct {
	// Deadline is the expiry time in unix milliseconds.
	Deadline int64
	// Value is the caller's: what the timer belongs to, so that the
	// code that receives a fired *Timer can find its item.
	Value any

	next, prev *Timer
	list       *timerList // nil when not scheduled
}

// Scheduled reports whether t is scheduled in a wheel. It reads state owned by the wheel's
// owner: with a Scheduler, use the result of Remove instead.
func (t *Timer) Scheduled() bool { return t.list != nil }

// timerList is a doubly linked list of timers: one slot, the due list or the firing list.
type timerList struct {
	head, tail *Timer
	// min is a lower bound on the deadlines (as keys) in the list, valid while head != nil:
	// exact unless the earliest timer was removed.
	min   uint64
	wheel *Wheel
	level uint8 // noLevel for the due and firing lists
	slot  uint8
}

func (l *timerList) push(t *Timer, d uint64) {
	t.list = l
	t.next = nil
	t.prev = l.tail
	if l.tail == nil {
		l.head = t
		l.min = d
	} else {
		l.tail.next = t
		l.min = min(l.min, d)
	}
	l.tail = t
}

// Wheel is a hierarchical timer wheel with 1 ms resolution; see the package doc. It is not
// safe for concurrent use. Create it with NewWheel.
type Wheel struct {
	// now is the wheel's time as a key: every timer in a slot has a deadline after it.
	now       uint64
	n         int
	occ       [numLevels]uint64 // bit s of occ[l]: slots[l][s] is non-empty
	slots     [numLevels][numSlots]timerList
	due       timerList // deadline <= now when added; fires in the next Advance
	firing    timerList // collected by Advance, not yet passed to fire
	advancing bool
}

// key maps a deadline to an unsigned value with the same order, so that the whole int64
// range (negative deadlines, math.MaxInt64) fits the digit arithmetic.
func key(ms int64) uint64 { return uint64(ms) ^ (1 << 63) }

func unkey(k uint64) int64 { return int64(k ^ (1 << 63)) }

// NewWheel returns an empty wheel whose time is now (unix milliseconds).
func NewWheel(now int64) *Wheel {
	w := &Wheel{now: key(now)}
	for l := range w.slots {
		for s := range w.slots[l] {
			w.slots[l][s] = timerList{wheel: w, level: uint8(l), slot: uint8(s)}
		}
	}
	w.due = timerList{wheel: w, level: noLevel}
	w.firing = timerList{wheel: w, level: noLevel}
	return w
}

// Len returns the number of scheduled timers, including those that are due but have not
// been passed to fire yet.
func (w *Wheel) Len() int { return w.n }

// Add schedules t to fire at t.Deadline. A deadline that is not after the wheel's time
// fires on the next Advance. If t is already scheduled in w it is rescheduled; Add panics
// if t is scheduled in another wheel. O(1), no allocation.
func (w *Wheel) Add(t *Timer) {
	if t.list != nil {
		if t.list.wheel != w {
			panic("ttl: Add of a timer scheduled in another wheel")
		}
		w.unlink(t)
	} else {
		w.n++
	}
	d := key(t.Deadline)
	if d <= w.now {
		w.due.push(t, d)
		return
	}
	w.insert(t, d)
}

// Remove unschedules t and reports whether it was scheduled in w. A timer that Advance
// has already collected but not yet passed to fire can still be removed, and then does
// not fire. O(1).
func (w *Wheel) Remove(t *Timer) bool {
	if t.list == nil || t.list.wheel != w {
		return false
	}
	w.unlink(t)
	w.n--
	return true
}

// Advance moves the wheel's time to now and calls fire for every timer whose Deadline is
// <= now, each exactly once, none early: first the timers added with a deadline already
// passed, then the others in non-decreasing deadline order (ties in no particular order).
// A now earlier than the wheel's time does not move it back: only the already-due timers
// fire. Each timer is unscheduled before fire is called with it, so fire may Add it (or
// any other timer) again; a timer added by fire with a deadline <= now fires on the next
// Advance, not in this one, and a timer removed by fire before its turn does not fire.
// fire must not call Advance.
func (w *Wheel) Advance(now int64, fire func(*Timer)) {
	if w.advancing {
		panic("ttl: Advance called from fire")
	}
	w.advancing = true
	defer func() { w.advancing = false }()

	target := max(key(now), w.now)
	for t := w.due.head; t != nil; {
		next := t.next
		w.firing.push(t, key(t.Deadline))
		t = next
	}
	w.due.head, w.due.tail = nil, nil

	for {
		level, slot, start, ok := w.earliest()
		if !ok || start > target {
			break
		}
		l := &w.slots[level][slot]
		t, lmin := l.head, l.min
		l.head, l.tail = nil, nil
		w.occ[level] &^= 1 << slot
		if level == lastLevel && slot == overflowSlot {
			// Nothing else is scheduled (every other slot is earlier than the next
			// epoch), so the wheel may jump to the earliest overflow deadline.
			w.now = max(start, min(target, lmin))
		} else {
			w.now = start
		}
		for t != nil {
			next := t.next
			if d := key(t.Deadline); d <= w.now {
				w.firing.push(t, d)
			} else {
				w.insert(t, d)
			}
			t = next
		}
	}
	w.now = target

	for t := w.firing.head; t != nil; t = w.firing.head {
		w.unlink(t)
		w.n--
		fire(t)
	}
}

// NextDeadline returns a lower bound on the earliest deadline of the scheduled timers, and
// false if there are none. It is exact unless the earliest timer of the earliest slot was
// removed; an Advance to the returned time then cascades that slot and makes it exact
// again. It may be before the wheel's time when timers are due. O(levels).
func (w *Wheel) NextDeadline() (int64, bool) {
	if w.n == 0 {
		return 0, false
	}
	m := uint64(math.MaxUint64)
	if w.due.head != nil {
		m = w.due.min
	}
	if w.firing.head != nil {
		m = min(m, w.firing.min)
	}
	if level, slot, _, ok := w.earliest(); ok {
		m = min(m, w.slots[level][slot].min)
	}
	return unkey(m), true
}

// insert puts t into its slot; d = key(t.Deadline) > w.now.
func (w *Wheel) insert(t *Timer, d uint64) {
	level := (bits.Len64(d^w.now) - 1) / slotBits
	slot := overflowSlot
	if level >= numLevels {
		level = lastLevel
	} else {
		slot = int(d>>(level*slotBits)) & slotMask
	}
	w.slots[level][slot].push(t, d)
	w.occ[level] |= 1 << slot
}

func (w *Wheel) unlink(t *Timer) {
	l := t.list
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.next, t.prev, t.list = nil, nil, nil
	if l.head == nil && l.level != noLevel {
		w.occ[l.level] &^= 1 << l.slot
	}
}

// earliest returns the occupied slot that expires first and the time it starts. Every
// occupied slot of a level is after the wheel's digit at that level, and every slot of a
// lower level expires before any slot of a higher one, so it is the first occupied slot
// of the lowest non-empty level, with the overflow slot last.
func (w *Wheel) earliest() (level, slot int, start uint64, ok bool) {
	for level = range numLevels {
		occ := w.occ[level]
		if level == lastLevel {
			occ &^= 1 << overflowSlot
		}
		if occ != 0 {
			shift := level * slotBits
			slot = bits.TrailingZeros64(occ)
			base := w.now &^ (1<<(shift+slotBits) - 1)
			return level, slot, base + uint64(slot)<<shift, true
		}
	}
	if w.occ[lastLevel]&(1<<overflowSlot) != 0 {
		// Overflow timers exist only when the next epoch is representable.
		return lastLevel, overflowSlot, w.now&^(1<<wheelBits-1) + 1<<wheelBits, true
	}
	return 0, 0, 0, false
}

// rebase moves the wheel's time to now, which may be earlier than the wheel's time, and
// re-inserts every timer relative to it: timers that were due but whose deadline is after
// now are scheduled again. It is for a clock that stepped backwards. O(n). Not during
// Advance.
func (w *Wheel) rebase(now int64) {
	var chain *Timer
	take := func(l *timerList) {
		for t := l.head; t != nil; {
			next := t.next
			t.next = chain
			chain = t
			t = next
		}
		l.head, l.tail = nil, nil
	}
	for level := range w.occ {
		for occ := w.occ[level]; occ != 0; occ &= occ - 1 {
			take(&w.slots[level][bits.TrailingZeros64(occ)])
		}
		w.occ[level] = 0
	}
	take(&w.due)
	w.now = key(now)
	for t := chain; t != nil; {
		next := t.next
		if d := key(t.Deadline); d <= w.now {
			w.due.push(t, d)
		} else {
			w.insert(t, d)
		}
		t = next
	}
}
