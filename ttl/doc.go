// Package ttl expires messages and queues at their deadlines: a hierarchical timer wheel
// (Wheel, a pure data structure) and the goroutine that drives it from a clock (Scheduler).
//
// # Why a wheel, and why intrusive timers
//
// Every message with a TTL gets a deadline, and a message must expire at its deadline
// wherever it sits in its queue, not only when it reaches the head. Most such messages
// are consumed long before they expire, so the common operations are add and remove, and
// they must be O(1) and allocation-free; firing is rarer and may cost a little more. A heap
// gives O(log n) add/remove and an allocation or index bookkeeping per entry; a timer wheel
// gives O(1) add/remove, and with intrusive timers (the Timer node is embedded in the item
// that expires, typically the broker's queue entry) nothing is allocated per timer.
//
// # Time
//
// Deadlines are unix milliseconds (int64, the whole range is valid, including negative
// values and math.MaxInt64). The resolution is 1 ms: a timer fires in the first Advance
// whose now is >= its Deadline, never in an earlier one. The Wheel has no clock of its
// own; every call takes or uses the caller's notion of now, and its time never moves
// backwards (an Advance with an earlier now is treated as an Advance to the wheel's time).
//
// # Levels
//
// The wheel has 8 levels of 64 slots. A slot of level L spans 64^L ms:
//
//	level  slot span         level span (64 slots)
//	0      1 ms              64 ms
//	1      64 ms             ~4.1 s
//	2      ~4.1 s            ~4.4 min
//	3      ~4.4 min          ~4.7 h
//	4      ~4.7 h            ~12.4 d
//	5      ~12.4 d           ~2.2 y
//	6      ~2.2 y            ~139 y
//	7      ~139 y            ~8,900 y (2^48 ms)
//
// A timer goes to the level of the highest 6-bit digit in which its deadline differs from
// the wheel's time, into the slot given by the deadline's digit at that level. So every
// timer in a slot of level L shares all digits above L with the wheel's time, all slots of
// a lower level expire before any slot of a higher level, and level 0 slots hold exactly
// one deadline each. When the wheel's time reaches the start of an occupied slot of level
// L > 0, the slot is cascaded: its timers are re-inserted relative to the new time and land
// on lower levels (each timer is cascaded at most 7 times). Deadlines that differ from the
// wheel's time above bit 48 (more than ~8,900 years away, or across a 2^48 ms epoch
// boundary) go to the overflow slot (level 7, slot 0), which is cascaded when the wheel
// reaches the next epoch; the wheel then jumps straight to the earliest of them, so a jump
// of now to math.MaxInt64 visits each occupied epoch once instead of every one between.
// (No real TTL is that long; these deadlines are handled correctly, not fast.)
//
// One occupancy bitmap (a uint64) per level says which slots are non-empty, so Advance
// visits only occupied slots: a jump of hours or years costs O(occupied slots visited ×
// levels), never one step per millisecond. Each slot keeps a lower bound of the deadlines
// added to it, which makes NextDeadline O(levels) and exact unless the earliest timer of
// the earliest slot was removed; then it is early, and the Advance at that time cascades
// the slot, after which NextDeadline is exact again (at most one empty wake-up).
//
// Timers whose deadline is not after the wheel's time when added (the deadline has passed)
// go to a due list and fire in the next Advance, before all others.
//
// # Complexity
//
//	Add, Remove      O(1), no allocation
//	NextDeadline     O(levels)
//	Advance          O(levels × slots visited + timers cascaded + timers fired), no allocation
//
// The wheel costs ~20 KB (512 slot lists) plus 48 bytes per Timer, embedded by the caller
// (TestTimerSize keeps the figure true).
//
// # Ownership and concurrency
//
// A Wheel is not safe for concurrent use; its owner serializes calls. A Timer belongs to at
// most one Wheel at a time; while it is scheduled the wheel owns its links and the caller
// must not change its Deadline (Remove it first, or call Add again, which reschedules).
// Advance calls fire after unscheduling the timer, so fire may Add it again (or Add and
// Remove any other timer) but must not call Advance.
//
// The Scheduler owns a Wheel and one goroutine. Add, Remove and Len are safe for
// concurrent use and never wait for fire: fire is called from the scheduler's goroutine
// without the scheduler's lock held, with all timers due at that moment in one batch, so
// the broker may call Add and Remove while holding its queue locks, and fire may take those
// locks. A Remove that returns false may race with a fire of the same timer that is about
// to run: fire must re-check, under the owner's lock, that the item is still live and its
// deadline has passed. Close stops the goroutine and waits for it.
package ttl
