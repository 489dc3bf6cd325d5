package broker

// deque is a ring buffer of entries ordered by Seq. Appends go to the back;
// requeued entries are inserted at their Seq position, which is almost
// always the front (they were delivered from the head).
type deque struct {
	buf  []*entry
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) at(i int) *entry { return d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque) set(i int, e *entry) { d.buf[(d.head+i)&(len(d.buf)-1)] = e }

func (d *deque) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]*entry, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.at(i)
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(e *entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.set(d.n, e)
	d.n++
}

func (d *deque) pushFront(e *entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = e
	d.n++
}

func (d *deque) front() *entry {
	if d.n == 0 {
		return nil
	}
	return d.buf[d.head]
}

func (d *deque) popFront() *entry {
	if d.n == 0 {
		return nil
	}
	e := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	if d.n == 0 {
		d.head = 0
	}
	return e
}

// insertSorted places e by Seq.
func (d *deque) insertSorted(e *entry) {
	if d.n == 0 || e.Seq < d.front().Seq {
		d.pushFront(e)
		return
	}
	if e.Seq > d.at(d.n-1).Seq {
		d.pushBack(e)
		return
	}
	// Binary search for the first element with a larger Seq, then shift
	// the tail right by one.
	lo, hi := 0, d.n
	for lo < hi {
		m := (lo + hi) / 2
		if d.at(m).Seq < e.Seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	d.pushBack(nil)
	for i := d.n - 1; i > lo; i-- {
		d.set(i, d.at(i-1))
	}
	d.set(lo, e)
}

// clear removes every entry and returns them in order.
func (d *deque) clear() []*entry {
	out := make([]*entry, d.n)
	for i := range out {
		out[i] = d.at(i)
	}
	*d = deque{}
	return out
}

// compact drops the entries that are no longer ready.
func (d *deque) compact() {
	if d.n == 0 {
		return
	}
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
