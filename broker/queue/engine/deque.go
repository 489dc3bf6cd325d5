package engine

// Deque is a ring buffer of entries ordered by seq. Appends go to the back;
// returning entries are inserted at their seq position, which is almost
// always the front (they were delivered from the head).
type Deque[E Entry] struct {
	buf   []E
	head  int
	n     int
	bytes int64 // resident bytes of the entries held, live or not
}

// Len returns the number of entries held, live or not.
func (d *Deque[E]) Len() int { return d.n }

// Bytes returns the resident bytes (EntryResident: bodies and properties)
// of the entries held, live or not (an entry that left from where it
// stood keeps them until the deque drops it).
func (d *Deque[E]) Bytes() int64 { return d.bytes }

// At returns the i-th entry from the front.
func (d *Deque[E]) At(i int) E { return d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *Deque[E]) set(i int, e E) { d.buf[(d.head+i)&(len(d.buf)-1)] = e }

func (d *Deque[E]) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]E, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.At(i)
	}
	d.buf, d.head = nb, 0
}

// PushBack appends e.
func (d *Deque[E]) PushBack(e E) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.set(d.n, e)
	d.n++
	d.bytes += e.EntryResident()
}

func (d *Deque[E]) pushFront(e E) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = e
	d.n++
	d.bytes += e.EntryResident()
}

// Front returns the first entry, the zero E if there is none.
func (d *Deque[E]) Front() E {
	if d.n == 0 {
		var zero E
		return zero
	}
	return d.buf[d.head]
}

// PopFront removes and returns the first entry, the zero E if there is
// none.
func (d *Deque[E]) PopFront() E {
	var zero E
	if d.n == 0 {
		return zero
	}
	e := d.buf[d.head]
	d.buf[d.head] = zero
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	d.bytes -= e.EntryResident()
	if d.n == 0 {
		d.head = 0
	}
	return e
}

// InsertSorted places e by seq.
func (d *Deque[E]) InsertSorted(e E) {
	seq := e.EntrySeq()
	if d.n == 0 || seq < d.Front().EntrySeq() {
		d.pushFront(e)
		return
	}
	if seq > d.At(d.n-1).EntrySeq() {
		d.PushBack(e)
		return
	}
	// Binary search for the first element with a larger seq, then shift
	// the rest right by one.
	lo, hi := 0, d.n
	for lo < hi {
		m := (lo + hi) / 2
		if d.At(m).EntrySeq() < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if d.n == len(d.buf) {
		d.grow()
	}
	d.n++
	for i := d.n - 1; i > lo; i-- {
		d.set(i, d.At(i-1))
	}
	d.set(lo, e)
	d.bytes += e.EntryResident()
}

// Clear removes every entry and returns them in order.
func (d *Deque[E]) Clear() []E {
	out := make([]E, d.n)
	for i := range out {
		out[i] = d.At(i)
	}
	*d = Deque[E]{}
	return out
}

// compact drops the entries that are no longer ready.
func (d *Deque[E]) compact() {
	if d.n == 0 {
		return
	}
	var live []E
	for _, e := range d.Clear() {
		if e.Ready() {
			live = append(live, e)
		}
	}
	for _, e := range live {
		d.PushBack(e)
	}
}
