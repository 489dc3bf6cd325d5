package engine

import "slices"

// Entry is what the engine asks of a queue entry. The broker's entry is
// one; the tests have their own.
type Entry interface {
	comparable
	// EntrySeq is the entry's sequence number in its queue: its order
	// within its level.
	EntrySeq() uint64
	// EntryPrio is its message priority; above the queue's top level it
	// counts as the top level.
	EntryPrio() uint8
	// EntrySize is its body size in bytes: what the queue's byte
	// counters (Bytes, a middle's Bytes) and length limits count.
	EntrySize() int64
	// EntryResident is what it holds in memory, in bytes: its body and
	// its properties (a header can be far larger than its body). What
	// the windows are bounded by.
	EntryResident() int64
	// Ready reports whether it is still ready. An entry that left from
	// where it stood (Ready.Remove) must report false from then on; the
	// deques drop it when it reaches a head.
	Ready() bool
	// Pageable reports whether the store alone may hold it now: the
	// batch putting it has been handed to the store (so a read finds it)
	// and nothing keeps it resident (a TTL-0 arrival).
	Pageable() bool
}

// Ready holds a queue's ready entries: one level per priority (a single
// level unless the queue was declared with x-max-priority). Entries leave
// from the highest non-empty level, oldest first within it.
//
// A level pages: it is a resident head, a middle that lives only in the
// store (known as a seq range and counters) and a resident tail of newer
// arrivals behind the middle. Delivery takes from the head; when the head
// runs low it is refilled from the middle (a store read, by the owner's
// Fill or Prefetch) or, with no middle, from the tail; when the tail grows
// past the window its front moves into the middle and its memory goes. So
// a level holds about two windows of entries in memory however deep it
// is. A window is bounded in entries (Window) and, if WindowBytes is set,
// in resident bytes too (EntryResident: bodies and properties): whichever
// bound is reached first makes it full, so large messages page with fewer
// entries resident. The counters (Len, Bytes: body bytes) include the
// middles: they never depend on what is resident.
//
// Only entries the store already holds can enter the middle (Pageable),
// and an entry the middle cannot take stops paging behind it, so the
// level's order is kept.
//
// An entry can also leave from the middle of a resident deque (it expired
// where it stood): Remove marks it gone, and the deques drop such entries
// when they reach the head, or all at once when they outnumber the live.
type Ready[E Entry] struct {
	levels []Level[E] // index = priority
	// high is at least the highest level with entries: top starts there
	// instead of at the highest level the queue allows (a queue declared
	// with x-max-priority 255 and traffic at 0 would look at 256 levels
	// per delivery). Raised when a level gains entries, lowered by top.
	high  int
	n     int   // live entries, middles included
	bytes int64 // their body bytes
	dead  int   // removed entries still held by the deques
	// Window is the resident target per level; 0 disables paging (every
	// entry stays in the head).
	Window int
	// WindowBytes, if > 0, also bounds a window's resident bytes, bodies
	// and properties (with Window > 0; a single entry larger than it
	// still fits alone).
	WindowBytes int64
	// Fill refills l's head from its middle now (a store read, under the
	// owner's lock); Prefetch starts such a read to complete later. Both
	// are set by the owner when Window > 0; they move what they read in
	// with MoveIn and finish with ReadDone.
	Fill     func(l *Level[E])
	Prefetch func(l *Level[E])
	// Paged, if set, is told of each entry that PageOut moves into a
	// middle: the engine forgets it, and the owner must mark it so (it
	// reports !Ready from then on: a timer that fired already must let it
	// be; the middle's read brings it back as a new entry) and moves its
	// timer.
	Paged func(e E)
}

// Level is one priority level. Its order is head, then middle, then tail:
// every seq in the middle is above every seq in the head and below every
// seq in the tail. Outside the engine its fields are read only, except
// Filling, which belongs to the owner's Prefetch.
type Level[E Entry] struct {
	Prio uint8
	n    int // live entries, middle included
	Head Deque[E]
	Mid  Middle
	Tail Deque[E]
	// Gen changes whenever the middle empties or is forgotten (Clear): a
	// read that started before is stale.
	Gen uint64
	// Filling is set by the owner while a read of the middle is under
	// way outside its lock (Prefetch); EndRead clears it.
	Filling bool
	// taken holds the seqs of entries taken out of the middle while
	// Filling (TakeOut): the read under way may hold them, and its merge
	// skips them (Taken) instead of moving them in.
	taken []uint64
	// meanResident is MeanResident's running mean; 0 until an entry has
	// paged out or been read in.
	meanResident int64
	// HeadMax is the highest seq that ever entered the head. Every entry
	// delivered from the level (and maybe still unacked, so still in the
	// store) has a seq up to it, so the tail and the middle hold only
	// seqs above it: an entry returning with a seq up to it goes back
	// into the head, or a middle read would find delivered entries in its
	// range.
	HeadMax uint64
}

// Len returns the level's live entries, its middle included.
func (l *Level[E]) Len() int { return l.n }

func (l *Level[E]) intoHead(e E) {
	l.Head.PushBack(e)
	l.HeadMax = max(l.HeadMax, e.EntrySeq())
}

// Middle is a level's non-resident part: the store holds its entries,
// memory only their count. From and To bound their seqs while N > 0; the
// store may hold other entries of the level in that range (dead letters
// waiting for a route), which are not part of it.
type Middle struct {
	From, To uint64
	N        int
	Bytes    int64
}

// Contains reports whether seq lies in the middle's range.
func (m *Middle) Contains(seq uint64) bool { return m.N > 0 && seq >= m.From && seq <= m.To }

// NewReady returns an empty ready list for a queue whose highest priority
// is maxPriority.
func NewReady[E Entry](maxPriority uint8) Ready[E] {
	r := Ready[E]{levels: make([]Level[E], int(maxPriority)+1), high: -1}
	for i := range r.levels {
		r.levels[i].Prio = uint8(i)
	}
	return r
}

// Len returns the number of ready entries, middles included.
func (r *Ready[E]) Len() int { return r.n }

// Bytes returns their body bytes, middles included.
func (r *Ready[E]) Bytes() int64 { return r.bytes }

// Resident returns the resident bytes (EntryResident) of the entries held
// in memory, over every level's head and tail: what the windows bound.
// Entries that left but are still held count until they are dropped.
func (r *Ready[E]) Resident() int64 {
	var n int64
	for i := range r.levels {
		n += r.levels[i].Head.Bytes() + r.levels[i].Tail.Bytes()
	}
	return n
}

// Levels returns the number of levels.
func (r *Ready[E]) Levels() int { return len(r.levels) }

// Level returns level prio (capped at the top level).
func (r *Ready[E]) Level(prio uint8) *Level[E] {
	return &r.levels[min(int(prio), len(r.levels)-1)]
}

// LevelOf returns the level of e.
func (r *Ready[E]) LevelOf(e E) *Level[E] { return r.Level(e.EntryPrio()) }

// top returns the highest level with a live entry, with a live entry at
// its head: dead entries at the heads it looks at are dropped, and an
// empty head is refilled. It returns nil if there is none, or if the
// highest level's middle could not be read (a store failure): a lower
// level is never served ahead of a higher one.
func (r *Ready[E]) top() *Level[E] {
	for i := r.high; i >= 0; i-- {
		l := &r.levels[i]
		if l.n == 0 && i == r.high {
			r.high-- // empty, and so is everything above it
		}
		for l.n > 0 {
			for l.Head.Len() > 0 && !l.Head.Front().Ready() {
				l.Head.PopFront()
				r.dead--
			}
			if l.Head.Len() > 0 {
				return l
			}
			before := l.n + l.Tail.Len() + l.Mid.N
			r.refill(l)
			if l.Head.Len() == 0 && l.n+l.Tail.Len()+l.Mid.N == before {
				return nil // nothing could be read
			}
		}
	}
	return nil
}

// refill tops up l's head: from the middle while there is one, else from
// the tail.
func (r *Ready[E]) refill(l *Level[E]) {
	if l.Mid.N > 0 && r.Fill != nil {
		r.Fill(l)
	}
	if l.Mid.N == 0 {
		r.moveTail(l)
	}
}

// moveTail moves entries from the tail's front to the head, up to the
// window (at least one; all of them without paging). Only when the level
// has no middle.
func (r *Ready[E]) moveTail(l *Level[E]) {
	for moved := 0; l.Tail.Len() > 0 && (moved == 0 || !r.headFull(l)); moved++ {
		l.intoHead(l.Tail.PopFront())
	}
}

// headFull reports whether l's head holds a window.
func (r *Ready[E]) headFull(l *Level[E]) bool {
	return r.Window > 0 && (l.Head.Len() >= r.Window || r.WindowBytes > 0 && l.Head.Bytes() >= r.WindowBytes)
}

// headLow reports whether l's head holds less than half a window in both
// bounds: time to read the next one.
func (r *Ready[E]) headLow(l *Level[E]) bool {
	return r.Window > 0 && l.Head.Len() < r.Window/2 && (r.WindowBytes <= 0 || l.Head.Bytes() < r.WindowBytes/2)
}

// HeadRoom returns how much a read of l's middle should bring in: what
// fills the head to a window, and at least half a window, in entries and
// in resident bytes (0 bytes: no byte bound). Where the bytes bind, the
// entries asked for are twice what the level's mean resident size (or,
// before one is known, its middle's mean body size) says fit, so the read
// of the index stays near what is used.
func (r *Ready[E]) HeadRoom(l *Level[E]) (n int, bytes int64) {
	n = max(r.Window-l.Head.Len(), r.Window/2, 1)
	if r.WindowBytes > 0 {
		bytes = max(r.WindowBytes-l.Head.Bytes(), r.WindowBytes/2, 1)
		per := l.MeanResident()
		if per == 0 && l.Mid.N > 0 && l.Mid.Bytes > 0 {
			per = max(l.Mid.Bytes/int64(l.Mid.N), 1)
		}
		if per > 0 {
			if k := 2*bytes/per + 2; k < int64(n) {
				n = int(k)
			}
		}
	}
	return n, bytes
}

// MeanResident is the resident bytes of one of l's entries as last seen:
// a running mean over the entries that paged out or were read in (0 while
// none has). A read of the middle sizes its chunks by it (ReadMiddle).
func (l *Level[E]) MeanResident() int64 { return l.meanResident }

// SeenResident adds one entry's resident bytes to l's running mean
// (MeanResident), weighting the last 8 or so.
func (l *Level[E]) SeenResident(n int64) {
	if l.meanResident == 0 {
		l.meanResident = max(n, 1)
		return
	}
	l.meanResident = max(l.meanResident+(n-l.meanResident)/8, 1)
}

// TailOver reports whether l's tail holds more than a window: its front
// is to page out.
func (r *Ready[E]) TailOver(l *Level[E]) bool {
	return r.Window > 0 && (l.Tail.Len() > r.Window || r.WindowBytes > 0 && l.Tail.Bytes() > r.WindowBytes)
}

// TailOverBy returns by how many entries and how many resident bytes l's
// tail is over a window (0 where it is within a bound). O(1): it is asked
// on every arrival to a level whose tail is over.
func (r *Ready[E]) TailOverBy(l *Level[E]) (n int, bytes int64) {
	if r.Window <= 0 {
		return 0, 0
	}
	n = max(l.Tail.Len()-r.Window, 0)
	if r.WindowBytes > 0 {
		bytes = max(l.Tail.Bytes()-r.WindowBytes, 0)
	}
	return n, bytes
}

// TailExcess returns how many entries at the front of l's tail are beyond
// a window: what PageOut would move if it could. It walks the front only
// where the byte bound binds (large messages, so few entries).
func (r *Ready[E]) TailExcess(l *Level[E]) int {
	n, over := r.TailOverBy(l)
	for i := 0; over > 0 && i < l.Tail.Len(); i++ {
		over -= l.Tail.At(i).EntryResident()
		n = max(n, i+1)
	}
	return n
}

// PushBack appends a new arrival: to the head while the level is caught
// up (no middle, no tail) and the head has room, else to the tail.
func (r *Ready[E]) PushBack(e E) {
	l := r.LevelOf(e)
	if l.Mid.N == 0 && l.Tail.Len() == 0 && !r.headFull(l) {
		l.intoHead(e)
	} else {
		l.Tail.PushBack(e)
	}
	r.added(l, e)
}

// InsertSorted places e by seq: a returning entry goes back into the head
// (it was delivered from there, so its seq is at most HeadMax), and so
// does a dead-lettered copy landing with a seq up to HeadMax (one with a
// higher seq was delivered meanwhile); one above it goes into the tail
// unless the level is caught up and the head has room.
func (r *Ready[E]) InsertSorted(e E) {
	l := r.LevelOf(e)
	seq := e.EntrySeq()
	var toHead bool
	switch {
	case seq <= l.HeadMax:
		toHead = true
	case l.Mid.N > 0:
		toHead = seq < l.Mid.From
	case l.Tail.Len() > 0:
		toHead = seq < l.Tail.Front().EntrySeq()
	default: // caught up: the tail starts where a full head ends
		toHead = !r.headFull(l) || seq < l.Head.At(l.Head.Len()-1).EntrySeq()
	}
	if toHead {
		l.Head.InsertSorted(e)
		l.HeadMax = max(l.HeadMax, seq)
	} else {
		l.Tail.InsertSorted(e)
	}
	r.added(l, e)
}

func (r *Ready[E]) added(l *Level[E], e E) {
	r.high = max(r.high, int(l.Prio))
	l.n++
	r.n++
	r.bytes += e.EntrySize()
}

// Front returns the entry that leaves next, the zero E if there is none
// (or if its level's middle could not be read).
func (r *Ready[E]) Front() E {
	if l := r.top(); l != nil {
		return l.Head.Front()
	}
	var zero E
	return zero
}

// ResidentFront returns the entry that leaves next if it is resident, and
// whether it is: unlike Front it reads nothing from the store (an entry
// taken off the head, whose level's next lies in the middle, is not
// resident).
func (r *Ready[E]) ResidentFront() (E, bool) {
	for i := r.high; i >= 0; i-- {
		l := &r.levels[i]
		if l.n == 0 {
			continue
		}
		for j := range l.Head.Len() {
			if e := l.Head.At(j); e.Ready() {
				return e, true
			}
		}
		break // the level's next is in its middle or tail
	}
	var zero E
	return zero, false
}

// PopFront removes and returns the entry that leaves next (the zero E as
// Front), and reads ahead when the head runs low.
func (r *Ready[E]) PopFront() E {
	l := r.top()
	if l == nil {
		var zero E
		return zero
	}
	e := l.Head.PopFront()
	l.n--
	r.n--
	r.bytes -= e.EntrySize()
	if r.headLow(l) {
		switch {
		case l.Mid.N > 0 && r.Prefetch != nil:
			r.Prefetch(l)
		case l.Mid.N > 0:
			r.refill(l)
		case l.Tail.Len() > 0:
			r.moveTail(l)
		}
	}
	return e
}

// Remove accounts for e leaving from where it stands in a resident deque;
// e already reports !Ready().
func (r *Ready[E]) Remove(e E) {
	r.LevelOf(e).n--
	r.n--
	r.bytes -= e.EntrySize()
	r.dead++
	if r.dead > 1024 && r.dead > r.n {
		r.compact()
	}
}

func (r *Ready[E]) compact() {
	for i := range r.levels {
		l := &r.levels[i]
		l.Head.compact()
		l.Tail.compact()
	}
	r.dead = 0
}

// PageOut moves the tail's front into the middle while the tail is over
// the window and its front entry can live in the store alone (Pageable,
// and its seq below limit: no entry still on its way to the queue has a
// seq below it). Dead entries at the front are dropped on the way.
func (r *Ready[E]) PageOut(l *Level[E], limit uint64) {
	for l.Tail.Len() > 0 {
		e := l.Tail.Front()
		if !e.Ready() {
			l.Tail.PopFront()
			r.dead--
			continue
		}
		seq := e.EntrySeq()
		if !r.TailOver(l) || !e.Pageable() || seq >= limit {
			return
		}
		if l.Mid.N > 0 && seq <= l.Mid.To {
			// Never: the middle is a seq range, so an entry below its
			// end must not join it (reads would skip what lies above).
			return
		}
		l.Tail.PopFront()
		l.SeenResident(e.EntryResident())
		if r.Paged != nil {
			r.Paged(e)
		}
		if l.Mid.N == 0 {
			l.Mid.From = seq
		}
		l.Mid.To = seq
		l.Mid.N++
		l.Mid.Bytes += e.EntrySize()
	}
}

// Clear removes every live resident entry and returns them, highest
// priority first, and forgets the middles (the owner deletes their
// entries from the store, or drops the queue).
func (r *Ready[E]) Clear() []E {
	out := make([]E, 0, min(r.n, 1<<16))
	for i := len(r.levels) - 1; i >= 0; i-- {
		l := &r.levels[i]
		for _, d := range []*Deque[E]{&l.Head, &l.Tail} {
			for _, e := range d.Clear() {
				if e.Ready() {
					out = append(out, e)
				}
			}
		}
		l.n, l.Mid = 0, Middle{}
		l.Gen++
	}
	r.n, r.dead, r.bytes = 0, 0, 0
	return out
}

// Each calls fn for every live resident entry.
func (r *Ready[E]) Each(fn func(E)) {
	for i := range r.levels {
		l := &r.levels[i]
		for _, d := range []*Deque[E]{&l.Head, &l.Tail} {
			for j := 0; j < d.Len(); j++ {
				if e := d.At(j); e.Ready() {
					fn(e)
				}
			}
		}
	}
}

// --- the middle, as the owner's reads find it ------------------------------

// Skip records that the store entry at seq was read: the middle resumes
// after it (whether or not it was part of the middle).
func (l *Level[E]) Skip(seq uint64) { l.Mid.From = seq + 1 }

// MoveIn puts e, an entry of l's middle read back from the store, into
// l's head.
func (r *Ready[E]) MoveIn(l *Level[E], e E) {
	l.Mid.N--
	l.Mid.Bytes -= e.EntrySize()
	l.SeenResident(e.EntryResident())
	l.intoHead(e)
}

// TakeOut accounts for the entry at seq of l's middle, of size bytes,
// leaving the ready list: read back and found to be something else (a
// dead letter waiting for a route), or gone from where it lay (expired).
// Unless read is set (it is that read), a read under way may hold it:
// its merge must skip it (Taken).
func (r *Ready[E]) TakeOut(l *Level[E], seq uint64, size int64, read bool) {
	if !read && l.Filling {
		l.taken = append(l.taken, seq)
	}
	l.Mid.N--
	l.Mid.Bytes -= size
	l.n--
	r.n--
	r.bytes -= size
	if l.Mid.N == 0 {
		l.Mid = Middle{}
		l.Gen++
	}
}

// Taken reports whether the entry at seq, found by the read under way,
// was taken out of the middle while it ran (TakeOut): the merge skips it.
func (l *Level[E]) Taken(seq uint64) bool { return slices.Contains(l.taken, seq) }

// EndRead ends the owner's read under way (Filling), merged or not.
func (l *Level[E]) EndRead() {
	l.Filling = false
	l.taken = l.taken[:0]
}

// ReadDone ends a read of l's middle; done says the read reached the end
// of the middle's range as it stood when the read began. If the store held
// fewer entries than the middle counts, the counters follow the store,
// and the difference is returned (non-zero only from a broker or store
// bug: the owner logs it).
func (r *Ready[E]) ReadDone(l *Level[E], done bool) (missing int, missingBytes int64) {
	if done && l.Mid.N != 0 {
		missing, missingBytes = l.Mid.N, l.Mid.Bytes
		l.n -= missing
		r.n -= missing
		r.bytes -= missingBytes
		l.Mid.N = 0
	}
	if l.Mid.N == 0 {
		l.Mid = Middle{}
		l.Gen++
	}
	return missing, missingBytes
}

// InMiddle returns level prio and whether seq lies in its middle.
func (r *Ready[E]) InMiddle(prio uint8, seq uint64) (*Level[E], bool) {
	if int(prio) >= len(r.levels) {
		return nil, false
	}
	l := &r.levels[prio]
	return l, l.Mid.Contains(seq)
}

// Recover makes level prio's whole content one middle of n entries of
// bytes body bytes with seqs up to lastSeq: a queue recovered from the
// store's counters, read back as it is consumed. It reports false, and
// changes nothing, if prio is not one of the levels.
func (r *Ready[E]) Recover(prio uint8, lastSeq uint64, n int, bytes int64) bool {
	if int(prio) >= len(r.levels) {
		return false
	}
	l := &r.levels[prio]
	l.Mid = Middle{From: 0, To: lastSeq, N: n, Bytes: bytes}
	r.high = max(r.high, int(prio))
	l.n += n
	r.n += n
	r.bytes += bytes
	return true
}
