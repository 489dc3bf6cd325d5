package broker

// readyQueue holds a queue's ready entries: one level per priority (a
// single level unless the queue was declared with x-max-priority).
// Entries leave from the highest non-empty level, oldest first within it.
//
// A level pages: it is a resident head, a middle that lives only in the
// store (known as a seq range and counters), and a resident tail of newer
// arrivals behind the middle. Delivery takes from the head; when the head
// runs low it is refilled from the middle (a store read) or, with no
// middle, from the tail; when the tail grows past the window its stored
// entries move into the middle and their memory goes. So a level holds
// about two windows of entries in memory however deep it is. Counters
// (n, and the queue's ready bytes) include the middle: they never depend
// on what is resident.
//
// Only entries the store already holds can enter the middle (see
// pageOut; transient entries are written to the queue's volatile range
// first, spill.go), and an entry the middle cannot take stops paging
// behind it, so the level's order is kept.
//
// An entry can also leave from the middle of a resident deque (it expired
// where it stood): remove marks it, and the deques drop marked entries
// when they reach the head, or all at once when marked ones outnumber the
// live.
type readyQueue struct {
	levels []level // index = priority
	n      int     // live entries, middles included
	dead   int     // removed entries still held by the deques
	// window is the resident target per level; 0 disables paging (every
	// entry stays in the head).
	window int
	// fill refills l's head from its middle (a store read), prefetch
	// starts such a read to complete later; both set by the queue when
	// window > 0.
	fill     func(l *level)
	prefetch func(l *level)
	// paged, if set, is told of each entry that pageOut moves into a
	// middle (its timer moves with it).
	paged func(e *entry)
}

// level is one priority level. Its order is head, then middle, then tail:
// every seq in the middle is above every seq in the head and below every
// seq in the tail.
type level struct {
	prio uint8
	n    int // live entries, middle included
	head deque
	mid  midRange
	tail deque
	// gen changes whenever an entry leaves the middle other than by a
	// read into the head, and when the middle empties: a read that
	// started before is stale. filling is set while a prefetch is under
	// way.
	gen     uint64
	filling bool
	// headMax is the highest seq that ever entered the head. Every entry
	// delivered from the level (and maybe still unacked, so still in the
	// store) has a seq up to it, so the tail and the middle hold only
	// seqs above it: an entry returning with a seq up to it goes back
	// into the head, or a middle read would find delivered entries in its
	// range.
	headMax uint64
}

// intoHead appends e to l's head (e's seq is above the head's).
func (l *level) intoHead(e *entry) {
	l.head.pushBack(e)
	l.headMax = max(l.headMax, e.Seq)
}

// midRange is a level's non-resident middle: the store holds its entries,
// memory only their count. from and to bound their seqs while n > 0; the
// store may hold other entries of the level in that range (dead letters
// waiting for a route), which are not part of it.
type midRange struct {
	from, to uint64
	n        int
	bytes    int64
}

func newReadyQueue(maxPriority uint8) readyQueue {
	r := readyQueue{levels: make([]level, int(maxPriority)+1)}
	for i := range r.levels {
		r.levels[i].prio = uint8(i)
	}
	return r
}

func (r *readyQueue) len() int { return r.n }

// level returns the level of an entry.
func (r *readyQueue) level(e *entry) *level {
	return &r.levels[min(int(e.prio), len(r.levels)-1)]
}

// top returns the highest level with a live entry, with a live entry at
// its head: dead entries at the heads it looks at are dropped, and an
// empty head is refilled. It returns nil if there is none, or if the
// highest level's middle could not be read (a store failure): a lower
// level is never served ahead of a higher one.
func (r *readyQueue) top() *level {
	for i := len(r.levels) - 1; i >= 0; i-- {
		l := &r.levels[i]
		for l.n > 0 {
			for l.head.len() > 0 && l.head.front().state != stReady {
				l.head.popFront()
				r.dead--
			}
			if l.head.len() > 0 {
				return l
			}
			before := l.n + l.tail.len() + l.mid.n
			r.refill(l)
			if l.head.len() == 0 && l.n+l.tail.len()+l.mid.n == before {
				return nil // nothing could be read
			}
		}
	}
	return nil
}

// refill tops up l's head: from the middle while there is one, else from
// the tail.
func (r *readyQueue) refill(l *level) {
	if l.mid.n > 0 && r.fill != nil {
		r.fill(l)
	}
	if l.mid.n == 0 {
		r.moveTail(l)
	}
}

// moveTail moves entries from the tail's front to the head, up to the
// window (all of them without paging). Only when the level has no middle.
func (r *readyQueue) moveTail(l *level) {
	room := l.tail.len()
	if r.window > 0 {
		room = max(r.window-l.head.len(), 1)
	}
	for ; room > 0 && l.tail.len() > 0; room-- {
		l.intoHead(l.tail.popFront())
	}
}

// pushBack appends a new arrival: to the head while the level is caught
// up (no middle, no tail) and the head has room, else to the tail.
func (r *readyQueue) pushBack(e *entry) {
	l := r.level(e)
	if l.mid.n == 0 && l.tail.len() == 0 && (r.window == 0 || l.head.len() < r.window) {
		l.intoHead(e)
	} else {
		l.tail.pushBack(e)
	}
	l.n++
	r.n++
}

// insertSorted places e by seq: a requeued entry goes back into the head
// (it was delivered from there, so its seq is at most headMax), and so
// does a dead-lettered copy landing with a seq up to headMax (one with a
// higher seq was delivered meanwhile); one above it goes into the tail
// unless the level is caught up and the head has room.
func (r *readyQueue) insertSorted(e *entry) {
	l := r.level(e)
	var toHead bool
	switch {
	case e.Seq <= l.headMax:
		toHead = true
	case l.mid.n > 0:
		toHead = e.Seq < l.mid.from
	case l.tail.len() > 0:
		toHead = e.Seq < l.tail.front().Seq
	default: // caught up: the tail starts where a full head ends
		toHead = r.window == 0 || l.head.len() < r.window || e.Seq < l.head.at(l.head.len()-1).Seq
	}
	if toHead {
		l.head.insertSorted(e)
		l.headMax = max(l.headMax, e.Seq)
	} else {
		l.tail.insertSorted(e)
	}
	l.n++
	r.n++
}

func (r *readyQueue) front() *entry {
	if l := r.top(); l != nil {
		return l.head.front()
	}
	return nil
}

func (r *readyQueue) popFront() *entry {
	l := r.top()
	if l == nil {
		return nil
	}
	e := l.head.popFront()
	l.n--
	r.n--
	// Read ahead before the head runs dry.
	if r.window > 0 && l.head.len() < r.window/2 {
		switch {
		case l.mid.n > 0 && r.prefetch != nil:
			r.prefetch(l)
		case l.mid.n > 0:
			r.refill(l)
		case l.tail.len() > 0:
			r.moveTail(l)
		}
	}
	return e
}

// remove accounts for e leaving from where it stands (a resident deque);
// the caller has already set e.state to something other than stReady.
func (r *readyQueue) remove(e *entry) {
	r.level(e).n--
	r.n--
	r.dead++
	if r.dead > 1024 && r.dead > r.n {
		r.compact()
	}
}

func (r *readyQueue) compact() {
	for i := range r.levels {
		l := &r.levels[i]
		l.head.compact()
		l.tail.compact()
	}
	r.dead = 0
}

// pageOut moves the tail's front into the middle while the tail is over
// the window and its front entry can live in the store alone: the store
// holds it already (inStore), it is not a TTL-0 arrival, and its seq is
// below limit (no dead-lettered copy still on its way to the queue has a
// seq below it: see Queue.minInflight). Marked entries at the front are
// dropped on the way.
func (r *readyQueue) pageOut(l *level, limit uint64) {
	for l.tail.len() > 0 {
		e := l.tail.front()
		if e.state != stReady {
			l.tail.popFront()
			r.dead--
			continue
		}
		if l.tail.len() <= r.window || !e.inStore || e.zeroTTL || e.Seq >= limit {
			return
		}
		if l.mid.n > 0 && e.Seq <= l.mid.to {
			// Never: the middle is a seq range, so an entry below its
			// end must not join it (reads would skip what lies above).
			return
		}
		l.tail.popFront()
		e.state = stPaged
		if r.paged != nil {
			r.paged(e)
		}
		if l.mid.n == 0 {
			l.mid.from = e.Seq
		}
		l.mid.to = e.Seq
		l.mid.n++
		l.mid.bytes += int64(e.bodySize())
	}
}

// clear removes every live resident entry and returns them, highest
// priority first, and forgets the middles (the caller deletes their
// entries from the store, or drops the queue).
func (r *readyQueue) clear() []*entry {
	out := make([]*entry, 0, min(r.n, 1<<16))
	for i := len(r.levels) - 1; i >= 0; i-- {
		l := &r.levels[i]
		for _, d := range []*deque{&l.head, &l.tail} {
			for _, e := range d.clear() {
				if e.state == stReady {
					out = append(out, e)
				}
			}
		}
		l.n, l.mid = 0, midRange{}
		l.gen++
	}
	r.n, r.dead = 0, 0
	return out
}

// each calls fn for every live resident entry.
func (r *readyQueue) each(fn func(*entry)) {
	for i := range r.levels {
		l := &r.levels[i]
		for _, d := range []*deque{&l.head, &l.tail} {
			for j := 0; j < d.len(); j++ {
				if e := d.at(j); e.state == stReady {
					fn(e)
				}
			}
		}
	}
}
