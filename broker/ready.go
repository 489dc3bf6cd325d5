package broker

// readyQueue holds a queue's ready entries: one deque per priority level
// (a single level unless the queue was declared with x-max-priority).
// Entries leave from the highest non-empty level, oldest first within it.
type readyQueue struct {
	levels []deque // index = priority
	n      int
}

func newReadyQueue(maxPriority uint8) readyQueue {
	return readyQueue{levels: make([]deque, int(maxPriority)+1)}
}

func (r *readyQueue) len() int { return r.n }

// level returns the deque for an entry's priority, capped at the maximum.
func (r *readyQueue) level(e *entry) *deque {
	return &r.levels[min(int(e.prio), len(r.levels)-1)]
}

func (r *readyQueue) top() *deque {
	for i := len(r.levels) - 1; i >= 0; i-- {
		if r.levels[i].len() > 0 {
			return &r.levels[i]
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

// clear removes every entry and returns them, highest priority first.
func (r *readyQueue) clear() []*entry {
	out := make([]*entry, 0, r.n)
	for i := len(r.levels) - 1; i >= 0; i-- {
		out = append(out, r.levels[i].clear()...)
	}
	r.n = 0
	return out
}
