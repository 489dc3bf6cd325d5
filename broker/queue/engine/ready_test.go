package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The deque and readyQueue are checked against a model: a slice kept sorted
// the way entries must leave (priority level descending, then Seq).

// entry is the tests' queue entry.
type entry struct {
	Seq     uint64
	prio    uint8
	size    int64
	gone    bool // left the ready list
	inStore bool
}

func (e *entry) EntrySeq() uint64 { return e.Seq }
func (e *entry) EntryPrio() uint8 { return e.prio }
func (e *entry) EntrySize() int64 { return e.size }

// EntryResident counts the body only: these entries have no properties.
func (e *entry) EntryResident() int64 { return e.size }
func (e *entry) Ready() bool          { return !e.gone }
func (e *entry) Pageable() bool       { return e.inStore }

func newTestEntry(seq uint64, prio uint8) *entry {
	return &entry{Seq: seq, prio: prio, size: int64(seq % 7)}
}

func seqs(es []*entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// dequeContents reads d front to back without changing it.
func dequeContents(d *Deque[*entry]) []uint64 {
	out := make([]uint64, d.Len())
	for i := range out {
		out[i] = d.At(i).Seq
	}
	return out
}

func TestDequeFIFO(t *testing.T) {
	var d Deque[*entry]
	if d.Front() != nil || d.PopFront() != nil || d.Len() != 0 {
		t.Fatal("empty deque not empty")
	}
	// Enough to grow several times.
	for i := uint64(1); i <= 100; i++ {
		d.PushBack(newTestEntry(i, 0))
	}
	for i := uint64(1); i <= 100; i++ {
		if f := d.Front(); f == nil || f.Seq != i {
			t.Fatalf("front = %v, want seq %d", f, i)
		}
		if e := d.PopFront(); e.Seq != i {
			t.Fatalf("popFront = %d, want %d", e.Seq, i)
		}
	}
	if d.Len() != 0 || d.PopFront() != nil {
		t.Fatal("deque not empty after popping everything")
	}
}

// TestDequeInsertSortedWrapped reinserts each position of a ring whose
// contents wrap around the end of its buffer.
func TestDequeInsertSortedWrapped(t *testing.T) {
	var want []uint64 // 0, 10, ..., 150: fills a 16-slot ring
	for i := uint64(0); i < 16; i++ {
		want = append(want, i*10)
	}
	for _, victim := range want[1:] {
		var d Deque[*entry]
		// Leave one entry (seq 0) in slot 10 of a 16-slot ring so that
		// what follows wraps.
		for range 11 {
			d.PushBack(newTestEntry(0, 0))
		}
		for range 10 {
			d.PopFront()
		}
		for _, s := range want[1:] {
			if s != victim {
				d.PushBack(newTestEntry(s, 0))
			}
		}
		if len(d.buf) != 16 || d.head != 10 {
			t.Fatalf("setup: buf %d head %d, want a wrapped 16-slot ring with head 10", len(d.buf), d.head)
		}
		d.InsertSorted(newTestEntry(victim, 0))
		if got := dequeContents(&d); !slices.Equal(got, want) {
			t.Fatalf("after reinserting %d: %v, want %v", victim, got, want)
		}
		// The ring is now full and wrapped: a middle insert must grow it.
		d.InsertSorted(newTestEntry(victim-5, 0))
		w2 := slices.Clone(want)
		w2 = slices.Insert(w2, slices.Index(w2, victim), victim-5)
		if got := dequeContents(&d); !slices.Equal(got, w2) {
			t.Fatalf("after growing insert of %d: %v, want %v", victim-5, got, w2)
		}
	}
}

func TestDequeInsertSortedFrontAndBack(t *testing.T) {
	var d Deque[*entry]
	d.InsertSorted(newTestEntry(5, 0)) // empty
	d.InsertSorted(newTestEntry(3, 0)) // front
	d.InsertSorted(newTestEntry(9, 0)) // back
	d.InsertSorted(newTestEntry(1, 0)) // front again
	d.InsertSorted(newTestEntry(4, 0)) // middle
	if got, want := dequeContents(&d), []uint64{1, 3, 4, 5, 9}; !slices.Equal(got, want) {
		t.Fatalf("contents %v, want %v", got, want)
	}
	out := d.Clear()
	if got, want := seqs(out), []uint64{1, 3, 4, 5, 9}; !slices.Equal(got, want) {
		t.Fatalf("clear returned %v, want %v", got, want)
	}
	if d.Len() != 0 || d.Front() != nil {
		t.Fatal("deque not empty after clear")
	}
	d.PushBack(newTestEntry(7, 0)) // usable after clear
	if d.PopFront().Seq != 7 {
		t.Fatal("deque unusable after clear")
	}
}

// readyModel is the reference: entries sorted by capped priority
// descending, then Seq ascending.
type readyModel struct {
	max uint8
	es  []*entry
}

func (m *readyModel) level(e *entry) uint8 { return min(e.prio, m.max) }

func (m *readyModel) insert(e *entry) {
	i, _ := slices.BinarySearchFunc(m.es, e, func(a, b *entry) int {
		if la, lb := m.level(a), m.level(b); la != lb {
			if la > lb {
				return -1
			}
			return 1
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	m.es = slices.Insert(m.es, i, e)
}

func (m *readyModel) pop() *entry {
	if len(m.es) == 0 {
		return nil
	}
	e := m.es[0]
	m.es = m.es[1:]
	return e
}

// readyOps drives a readyQueue and the model with ops decoded from data and
// checks they agree after every step. Each op is two bytes: an opcode and
// an argument (a priority for a publish, an index for a requeue).
//
// With window > 0 the queue pages: every entry counts as stored, page-outs
// run after each arrival, and the fill reads the middle back from every
// entry ever stored, delivered ones too (a delivery is not acked here, so
// its entry stays in the store, as it would until the ack): a middle
// whose range held a delivered entry would deliver it twice. With
// windowBytes > 0 the windows are bounded in body bytes as well (entries
// are 0 to 6 bytes), and the tails are checked to stay within both bounds.
func readyOps(t *testing.T, maxPriority uint8, window int, windowBytes int64, data []byte) {
	t.Helper()
	r := NewReady[*entry](maxPriority)
	m := &readyModel{max: maxPriority}
	var stored []*entry // every entry, in seq order (the store's view)
	if window > 0 {
		r.Window, r.WindowBytes = window, windowBytes
		r.Fill = func(l *Level[*entry]) {
			want, wantBytes := r.HeadRoom(l)
			var got int64
			for _, e := range stored { // seq order
				if want == 0 || wantBytes > 0 && got >= wantBytes {
					break
				}
				if m.level(e) != l.Prio || e.Seq < l.Mid.From || e.Seq > l.Mid.To {
					continue
				}
				e.gone = false // read back (the broker makes a new entry)
				l.Skip(e.Seq)
				r.MoveIn(l, e)
				want--
				got += e.size
			}
			if want > 0 && (wantBytes == 0 || got < wantBytes) && l.Mid.N != 0 {
				t.Fatalf("fill: middle of level %d counts %d entries the store does not hold", l.Prio, l.Mid.N)
			}
			r.ReadDone(l, false)
		}
		r.Paged = func(e *entry) { e.gone = true }
	}
	arrive := func(e *entry) {
		if window > 0 {
			e.inStore = true
			l := r.LevelOf(e)
			if r.TailOver(l) {
				r.PageOut(l, math.MaxUint64)
			}
			if r.TailOver(l) {
				t.Fatalf("level %d: tail of %d entries, %d bytes after a page-out (window %d, %d bytes)", l.Prio, l.Tail.Len(), l.Tail.Bytes(), window, windowBytes)
			}
		}
	}
	var nextSeq uint64
	var out []*entry // delivered, may be requeued
	check := func(op string) {
		t.Helper()
		if r.Len() != len(m.es) {
			t.Fatalf("%s: len %d, model %d", op, r.Len(), len(m.es))
		}
		var bytes int64
		for _, e := range m.es {
			bytes += e.size
		}
		if r.Bytes() != bytes {
			t.Fatalf("%s: bytes %d, model %d", op, r.Bytes(), bytes)
		}
		f := r.Front()
		if len(m.es) == 0 {
			if f != nil {
				t.Fatalf("%s: front %d of an empty queue", op, f.Seq)
			}
			return
		}
		if f != m.es[0] {
			t.Fatalf("%s: front seq %d, model %d", op, f.Seq, m.es[0].Seq)
		}
	}
	for len(data) >= 2 {
		op, arg := data[0], data[1]
		data = data[2:]
		switch op % 5 {
		case 0, 1: // publish with priority arg (may exceed the maximum)
			nextSeq++
			e := newTestEntry(nextSeq, arg%16)
			stored = append(stored, e)
			r.PushBack(e)
			m.insert(e)
			arrive(e)
			check("pushBack")
		case 2: // deliver the head
			got, want := r.PopFront(), m.pop()
			if got != want {
				t.Fatalf("popFront = %v, model %v", got, want)
			}
			if got != nil {
				out = append(out, got)
			}
			check("popFront")
		case 4: // a dead-lettered copy: a new seq, placed by insertSorted
			nextSeq++
			e := newTestEntry(nextSeq, arg%16)
			stored = append(stored, e)
			r.InsertSorted(e)
			m.insert(e)
			arrive(e)
			check("insertSorted new")
		case 3: // requeue a delivered entry
			if len(out) == 0 {
				continue
			}
			i := int(arg) % len(out)
			e := out[i]
			out = slices.Delete(out, i, i+1)
			r.InsertSorted(e)
			m.insert(e)
			arrive(e)
			check("insertSorted")
		}
	}
	if window > 0 {
		// The middles are not resident: drain through delivery.
		for len(m.es) > 0 {
			if got, want := r.PopFront(), m.pop(); got != want {
				t.Fatalf("drain: popFront = %v, model %v", got, want)
			}
		}
	}
	// Drain in order, then clear must leave it empty.
	want := seqs(m.es)
	var got []uint64
	snapshot := r.Clear()
	got = seqs(snapshot)
	// clear returns highest priority first, each level in Seq order,
	// which is exactly the delivery order.
	if !slices.Equal(got, want) {
		t.Fatalf("clear returned %v, model order %v", got, want)
	}
	if r.Len() != 0 || r.Front() != nil || r.PopFront() != nil {
		t.Fatal("readyQueue not empty after clear")
	}
}

func TestReadyQueuePriorities(t *testing.T) {
	r := NewReady[*entry](10)
	for i, p := range []uint8{1, 5, 3, 0, 200, 10, 5} {
		r.PushBack(newTestEntry(uint64(i+1), p))
	}
	// Priorities above the maximum count as the maximum: 200 (seq 5) and
	// 10 (seq 6) share level 10 in arrival order.
	want := []uint64{5, 6, 2, 7, 3, 1, 4}
	var got []uint64
	for r.Len() > 0 {
		got = append(got, r.PopFront().Seq)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delivery order %v, want %v", got, want)
	}
}

func TestReadyQueueWithoutPrioritiesIgnoresPriority(t *testing.T) {
	r := NewReady[*entry](0)
	for i, p := range []uint8{9, 0, 255, 3} {
		r.PushBack(newTestEntry(uint64(i+1), p))
	}
	var got []uint64
	for r.Len() > 0 {
		got = append(got, r.PopFront().Seq)
	}
	if want := []uint64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("delivery order %v, want FIFO %v", got, want)
	}
}

// TestReadyQueueModel runs random operation sequences, long enough to grow
// and wrap the rings, against the model.
func TestReadyQueueModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		maxP := []uint8{0, 1, 3, 10}[iter%4]
		data := make([]byte, 2*(50+rng.IntN(400)))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		window := []int{0, 1, 2, 4, 7}[iter%5]
		var windowBytes int64
		if window > 0 {
			windowBytes = []int64{0, 3, 8, 20}[iter/5%4]
		}
		readyOps(t, maxP, window, windowBytes, data)
	}
}

func FuzzReadyQueue(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 0, 0, 2, 0, 2, 0, 3, 1, 3, 0})
	f.Add(uint8(10), []byte{0, 1, 0, 5, 0, 3, 2, 0, 2, 0, 3, 0, 3, 0, 2, 0})
	f.Add(uint8(3), []byte{0, 15, 1, 2, 2, 0, 0, 9, 3, 0, 2, 0, 2, 0, 3, 7})
	f.Fuzz(func(t *testing.T, maxP uint8, data []byte) {
		window := int(maxP/12) % 6
		readyOps(t, maxP%12, window, int64(maxP/72)*int64(min(window, 1))*7, data)
	})
}

// A requeued entry whose seq is above a full head's last goes back into the
// head, not the tail: entries still delivered (unacked, so still in the
// store) have seqs between, and a middle formed from the tail would read
// them back and deliver them twice.
func TestReadyQueueRequeueAboveFullHeadStaysInHead(t *testing.T) {
	const window = 2
	r := NewReady[*entry](0)
	r.Window = window
	var stored []*entry // the store's view: every entry, delivered ones too
	r.Fill = func(l *Level[*entry]) {
		for _, e := range stored {
			if e.Seq < l.Mid.From || e.Seq > l.Mid.To {
				continue
			}
			e.gone = false // read back (the broker makes a new entry)
			l.Skip(e.Seq)
			r.MoveIn(l, e)
		}
		r.ReadDone(l, true)
	}
	r.Paged = func(e *entry) { e.gone = true }
	var seq uint64
	publish := func() {
		seq++
		e := newTestEntry(seq, 0)
		e.inStore = true
		stored = append(stored, e)
		r.PushBack(e)
		if l := r.LevelOf(e); l.Tail.Len() > window {
			r.PageOut(l, math.MaxUint64)
		}
	}
	out := map[uint64]*entry{}
	deliver := func() uint64 {
		e := r.PopFront()
		if e == nil {
			t.Fatal("nothing to deliver")
		}
		if out[e.Seq] != nil {
			t.Fatalf("entry %d delivered while it is still out", e.Seq)
		}
		out[e.Seq] = e
		return e.Seq
	}
	requeue := func(s uint64) {
		e := out[s]
		delete(out, s)
		r.InsertSorted(e)
	}
	for range 5 {
		publish()
	}
	for range 5 {
		deliver() // 1..5 out
	}
	requeue(1)
	requeue(2) // the head is full
	requeue(4) // above the head's last; 3 and 5 are still out
	for range 3 {
		publish() // 6, 7, 8: a middle may form
	}
	var got []uint64
	for r.Len() > 0 {
		got = append(got, deliver())
	}
	if want := []uint64{1, 2, 4, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// An entry taken out of a middle while the owner's read of it is under
// way (Filling) is remembered for that read only: its merge skips it, the
// read is not made stale, and the counters stay exact.
func TestTakeOutDuringReadIsSkippedByItsMerge(t *testing.T) {
	r := NewReady[*entry](0)
	r.Recover(0, 10, 10, 10)
	l := r.Level(0)
	gen := l.Gen
	l.Filling = true
	r.TakeOut(l, 3, 1, false) // expired while the read ran
	if l.Gen != gen {
		t.Fatal("a take-out made the read under way stale")
	}
	for seq := uint64(1); seq <= 10; seq++ { // what the read found
		l.Skip(seq)
		if l.Taken(seq) != (seq == 3) {
			t.Fatalf("Taken(%d) = %v", seq, l.Taken(seq))
		}
		if seq != 3 {
			r.MoveIn(l, &entry{Seq: seq, size: 1})
		}
	}
	if n, _ := r.ReadDone(l, true); n != 0 {
		t.Fatalf("%d missing after the merge", n)
	}
	l.EndRead()
	if l.Filling || l.Taken(3) {
		t.Fatal("EndRead kept the read's state")
	}
	if r.Len() != 9 || r.Bytes() != 9 || l.Mid.N != 0 {
		t.Fatalf("len %d bytes %d middle %+v, want 9, 9, empty", r.Len(), r.Bytes(), l.Mid)
	}
	// Without a read under way, nothing is remembered; emptying the
	// middle makes any later read stale.
	r.Recover(0, 20, 1, 1)
	gen = l.Gen
	r.TakeOut(l, 20, 1, false)
	if l.Taken(20) || l.Gen == gen {
		t.Fatalf("taken %v, gen %d -> %d", l.Taken(20), gen, l.Gen)
	}
}

// TailOverBy and TailExcess: how far a tail is over the window in each
// bound, and how many front entries must leave to bring it within both.
func TestTailOverByAndExcess(t *testing.T) {
	r := NewReady[*entry](0)
	r.Window, r.WindowBytes = 4, 100
	l := r.Level(0)
	for i, size := range []int64{10, 10, 10, 10, 10, 10} { // 6 entries, 60 bytes: 2 over
		l.Tail.PushBack(&entry{Seq: uint64(i + 1), size: size})
	}
	if n, b := r.TailOverBy(l); n != 2 || b != 0 {
		t.Fatalf("over by %d entries, %d bytes; want 2, 0", n, b)
	}
	if n := r.TailExcess(l); n != 2 {
		t.Fatalf("excess %d, want 2", n)
	}
	l.Tail.PushBack(&entry{Seq: 7, size: 70}) // 7 entries, 130 bytes: 3 over, 30 bytes over
	if n, b := r.TailOverBy(l); n != 3 || b != 30 {
		t.Fatalf("over by %d entries, %d bytes; want 3, 30", n, b)
	}
	if n := r.TailExcess(l); n != 3 { // the first 3 hold 30 bytes
		t.Fatalf("excess %d, want 3", n)
	}
	r.WindowBytes = 50 // 80 bytes over: the first 6 hold 60, the 7th brings 130
	if n := r.TailExcess(l); n != 7 {
		t.Fatalf("excess %d, want 7", n)
	}
}

// BenchmarkArrivalsBehindUnpageableTail: arrivals to a level whose tail is
// far over the window with entries that cannot page out yet (their store
// writes are on their way) cost O(1) each. (Asking the tail's excess by
// walking it made them O(tail): a TTL benchmark lost a third of its rate.)
func BenchmarkArrivalsBehindUnpageableTail(b *testing.B) {
	r := NewReady[*entry](0)
	r.Window, r.WindowBytes = 2048, 4<<20
	l := r.Level(0)
	seq := uint64(0)
	for range 20000 {
		seq++
		r.PushBack(&entry{Seq: seq, size: 1024}) // not in the store: not pageable
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		seq++
		r.PushBack(&entry{Seq: seq, size: 1024})
		if r.TailOver(l) {
			r.PageOut(l, seq)
			if n, bytes := r.TailOverBy(l); n < 0 || bytes < 0 {
				b.Fatal("negative")
			}
		}
	}
}

// top starts at the highest level that had entries, and finds a higher
// one again when it gains entries after the list emptied.
func TestReadyQueueHighLevelFollowsEntries(t *testing.T) {
	r := NewReady[*entry](255)
	r.PushBack(newTestEntry(1, 3))
	if got := r.PopFront(); got == nil || got.Seq != 1 || r.PopFront() != nil {
		t.Fatalf("first pop: %v", got)
	}
	for i, p := range []uint8{7, 250, 0, 250, 7} {
		r.PushBack(newTestEntry(uint64(i+2), p))
	}
	var got []uint64
	for r.Len() > 0 {
		got = append(got, r.PopFront().Seq)
	}
	if want := []uint64{3, 5, 2, 6, 4}; !slices.Equal(got, want) {
		t.Fatalf("delivery order %v, want %v", got, want)
	}
}
