package broker

// readyQueue holds a queue's ready entries: one deque per priority level
// (a single level unless the queue was declared with x-max-priority).
// Entries leave from the highest non-empty level, oldest first within it.
//
// An entry can also leave from the middle (it expired where it stood):
// remove marks it, and the deques drop marked entries when they reach the
// head, or all at once when marked ones outnumber the live.
type readyQueue struct {
	levels []deque // index = priority
	n      int     // live entries
	dead   int     // removed entries still held by the deques
}

func newReadyQueue(maxPriority uint8) readyQueue {
	return readyQueue{levels: make([]deque, int(maxPriority)+1)}
}

func (r *readyQueue) len() int { return r.n }

// level returns the deque for an entry's priority, capped at the maximum.
func (r *readyQueue) level(e *entry) *deque {
	return &r.levels[min(int(e.prio), len(r.levels)-1)]
}

// top returns the highest level with a live entry, dropping removed
// entries from the heads it looks at.
func (r *readyQueue) top() *deque {
	for i := len(r.levels) - 1; i >= 0; i-- {
		d := &r.levels[i]
		for d.len() > 0 && d.front().state != stReady {
			d.popFront()
			r.dead--
		}
		if d.len() > 0 {
			return d
		}
	}
	return nil
}

func (r *readyQueue) pushBack(e *entry) {
	r.level(e).pushBack(e)
	r.n++
}

func (r *readyQueue) insertSorted(e *entry) {
	r.level(e).insertSorted(e)
	r.n++
}

func (r *readyQueue) front() *entry {
	if d := r.top(); d != nil {
		return d.front()
	}
	return nil
}

func (r *readyQueue) popFront() *entry {
	d := r.top()
	if d == nil {
		return nil
	}
	r.n--
	return d.popFront()
}

// remove accounts for e leaving from where it stands; the caller has
// already set e.state to something other than stReady.
func (r *readyQueue) remove(e *entry) {
	r.n--
	r.dead++
	if r.dead > 1024 && r.dead > r.n {
		r.compact()
	}
}

func (r *readyQueue) compact() {
	for i := range r.levels {
		d := &r.levels[i]
		var live []*entry
		for _, e := range d.clear() {
			if e.state == stReady {
				live = append(live, e)
			}
		}
		for _, e := range live {
			d.pushBack(e)
		}
	}
	r.dead = 0
}

// clear removes every live entry and returns them, highest priority first.
func (r *readyQueue) clear() []*entry {
	out := make([]*entry, 0, r.n)
	for i := len(r.levels) - 1; i >= 0; i-- {
		for _, e := range r.levels[i].clear() {
			if e.state == stReady {
				out = append(out, e)
			}
		}
	}
	r.n, r.dead = 0, 0
	return out
}
