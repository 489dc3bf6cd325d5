package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/store/storetest"
)

// The paging rules against real stores: a Ready whose middles are read
// back from the store by Ranges, as the broker's queue does it, without a
// broker or a socket.

type testStore struct {
	name       string
	open       func(t *testing.T) store.Store
	checkpoint func(s store.Store) error // nil: the store has none
}

func testStores() []testStore {
	return []testStore{
		{name: "memory", open: func(*testing.T) store.Store { return memstore.New() }},
		{name: "disk", open: func(t *testing.T) store.Store {
			s, err := diskstore.Open(t.TempDir(), diskstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}, checkpoint: func(s store.Store) error { return s.(*diskstore.Store).Checkpoint() }},
	}
}

// storedEntry is a resident entry of the test queue: what it was read
// back as, and its message.
type storedEntry struct {
	entry
	ref store.Ref
	msg *store.Message
}

// TestPagingThroughStore publishes into a two-level queue with a small
// window, some entries to the durable range and some spilled to the
// volatile one, delivers and acks them (deletes in the store) interleaved
// with more publishes and returns, and checks that every entry is
// delivered once, in order (level, then seq), with its own body, and that
// the counters agree with a model throughout; halfway through, a disk
// store checkpoints, so reads come from segments and the index as well as
// the WAL's overlay. Bodies are 6 to 45 bytes; with a byte bound on the
// window, the tails stay within it and a read brings in no more than it
// asked for and one more entry.
func TestPagingThroughStore(t *testing.T) {
	for _, ts := range testStores() {
		for _, windowBytes := range []int64{0, 60} {
			t.Run(fmt.Sprintf("%s/window_bytes=%d", ts.name, windowBytes), func(t *testing.T) {
				pagingThroughStore(t, ts, windowBytes)
			})
		}
	}
}

func pagingThroughStore(t *testing.T, ts testStore, windowBytes int64) {
	s := ts.open(t)
	const window = 4
	const maxBody = 45
	rg := Ranges{Store: s, ID: 7, Durable: true}
	r := NewReady[*storedEntry](1)
	r.Window, r.WindowBytes = window, windowBytes
	spilled := false
	r.Paged = func(e *storedEntry) { e.gone = true }
	r.Fill = func(l *Level[*storedEntry]) {
		want, wantBytes := r.HeadRoom(l)
		pr, err := rg.ReadMiddle(spilled, l.Prio, l.Mid.From, l.Mid.To, want, wantBytes, l.MeanResident(), nil)
		if err != nil {
			t.Fatalf("read middle: %v", err)
		}
		var got int64
		for _, m := range pr.Metas {
			got += int64(m.Size)
		}
		if len(pr.Metas) > want || wantBytes > 0 && got >= wantBytes+maxBody {
			t.Fatalf("read %d entries of %d bytes, asked for %d and %d bytes", len(pr.Metas), got, want, wantBytes)
		}
		for i, m := range pr.Metas {
			l.Skip(m.Seq)
			e := &storedEntry{entry: entry{Seq: m.Seq, prio: m.Prio, size: int64(m.Size), inStore: true}, ref: m.Ref, msg: pr.Msgs[i]}
			r.MoveIn(l, e)
		}
		if n, _ := r.ReadDone(l, pr.Done); n != 0 {
			t.Fatalf("level %d: the middle counted %d entries the store does not hold", l.Prio, n)
		}
	}

	rng := rand.New(rand.NewPCG(3, 4))
	var seq uint64
	model := map[uint64]*storedEntry{} // ready entries by seq
	publish := func() {
		seq++
		prio := uint8(rng.IntN(2))
		pad := make([]byte, rng.IntN(maxBody-5-len(strconv.FormatUint(seq, 10))))
		m := &store.Message{ID: s.AllocMsgID(), Body: fmt.Appendf(nil, "body %d|%s", seq, pad), Persistent: true}
		q := rg.ID
		if rng.IntN(3) == 0 { // transient: written to the volatile range
			q, spilled = rg.VolatileID(), true
		}
		e := &storedEntry{entry: entry{Seq: seq, prio: prio, size: int64(len(m.Body))}, ref: store.Ref{Queue: q, Prio: prio, Seq: seq}, msg: m}
		storetest.Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: e.ref, Msg: m}}})
		e.inStore = true
		r.PushBack(e)
		model[seq] = e
		l := r.LevelOf(e)
		if r.TailOver(l) {
			r.PageOut(l, seq+1)
		}
		if r.TailOver(l) {
			t.Fatalf("level %d: tail of %d entries, %d bytes after a page-out", l.Prio, l.Tail.Len(), l.Tail.Bytes())
		}
	}
	nextInModel := func() uint64 {
		var best uint64
		var bestPrio int = -1
		for sq, e := range model {
			if int(e.prio) > bestPrio || int(e.prio) == bestPrio && sq < best {
				best, bestPrio = sq, int(e.prio)
			}
		}
		return best
	}
	check := func(what string) {
		t.Helper()
		var bytes int64
		for _, e := range model {
			bytes += e.size
		}
		if r.Len() != len(model) || r.Bytes() != bytes {
			t.Fatalf("%s: len %d bytes %d, model %d and %d", what, r.Len(), r.Bytes(), len(model), bytes)
		}
	}
	var out []*storedEntry // delivered, not acked
	delivered := map[uint64]bool{}
	deliver := func() {
		want := nextInModel()
		e := r.PopFront()
		if e == nil {
			t.Fatalf("nothing delivered, model has %d", len(model))
		}
		if e.Seq != want {
			t.Fatalf("delivered seq %d (level %d), model says %d", e.Seq, e.prio, want)
		}
		if got, _, _ := strings.Cut(string(e.msg.Body), "|"); got != "body "+strconv.FormatUint(e.Seq, 10) {
			t.Fatalf("seq %d delivered with body %q", e.Seq, got)
		}
		if delivered[e.Seq] {
			t.Fatalf("seq %d delivered twice without a return", e.Seq)
		}
		delivered[e.Seq] = true
		delete(model, e.Seq)
		out = append(out, e)
	}
	settle := func(requeue bool) {
		i := rng.IntN(len(out))
		e := out[i]
		out = slices.Delete(out, i, i+1)
		delete(delivered, e.Seq)
		if requeue {
			e.gone = false
			r.InsertSorted(e)
			model[e.Seq] = e
			return
		}
		storetest.Apply(t, s, &store.Batch{Deletes: []store.Ref{e.ref}})
	}

	for step := 0; step < 4000; step++ {
		if step == 2000 && ts.checkpoint != nil {
			if err := ts.checkpoint(s); err != nil {
				t.Fatal(err)
			}
		}
		switch k := rng.IntN(10); {
		case k < 5:
			publish()
		case k < 8 && len(model) > 0:
			deliver()
		case len(out) > 0:
			settle(k == 9)
		}
		check(fmt.Sprintf("step %d", step))
	}
	for len(model) > 0 {
		deliver()
		check("drain")
	}
	for len(out) > 0 {
		settle(false)
	}
	for prio := range uint8(2) {
		left, err := rg.ReadLevel(spilled, prio, 0, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("level %d: %d entries left in the store after every ack, first seq %d", prio, len(left), left[0].Seq)
		}
	}
}

// TestReadMiddleStopsAtItsEnd: entries above the middle's end (resident
// in the tail, or paged out after the read began) are left out, and the
// read then says it reached the end; a read bounded in bytes stops once
// it holds them (and then has not reached the end).
func TestReadMiddleStopsAtItsEnd(t *testing.T) {
	for _, ts := range testStores() {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.open(t)
			rg := Ranges{Store: s, ID: 3, Durable: true}
			var b store.Batch
			for seq := uint64(1); seq <= 10; seq++ {
				m := &store.Message{ID: s.AllocMsgID(), Body: []byte{byte(seq)}}
				b.Messages = append(b.Messages, m)
				b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: rg.ID, Seq: seq}, Msg: m})
			}
			storetest.Apply(t, s, &b)
			for _, c := range []struct {
				from, to  uint64
				want      int
				wantBytes int64 // bodies are 1 byte
				seqs      []uint64
				done      bool
			}{
				{1, 10, 4, 0, []uint64{1, 2, 3, 4}, false},
				{3, 5, 4, 0, []uint64{3, 4, 5}, true},
				{9, 10, 4, 0, []uint64{9, 10}, true},
				{1, 10, 8, 3, []uint64{1, 2, 3}, false},
				{8, 10, 8, 5, []uint64{8, 9, 10}, true},
				{9, 10, 4, 1, []uint64{9}, false},
				{9, 10, 1, 5, []uint64{9}, false},
			} {
				pr, err := rg.ReadMiddle(false, 0, c.from, c.to, c.want, c.wantBytes, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for i, m := range pr.Metas {
					got = append(got, m.Seq)
					if pr.Msgs[i] == nil || pr.Msgs[i].Body[0] != byte(m.Seq) {
						t.Fatalf("[%d,%d]: seq %d read with the wrong message", c.from, c.to, m.Seq)
					}
				}
				if !slices.Equal(got, c.seqs) || pr.Done != c.done {
					t.Fatalf("[%d,%d] want %d: seqs %v done %v, want %v done %v", c.from, c.to, c.want, got, pr.Done, c.seqs, c.done)
				}
			}
		})
	}
}

// TestReadBacklogMergesRanges: the durable and volatile backlog ranges
// share one seq and come back merged, bounded by max.
func TestReadBacklogMergesRanges(t *testing.T) {
	for _, ts := range testStores() {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.open(t)
			rg := Ranges{Store: s, ID: 5, Durable: true}
			var b store.Batch
			for seq := uint64(1); seq <= 9; seq++ {
				q := rg.BacklogID()
				if seq%3 == 0 {
					q = rg.VolatileBacklogID()
				}
				m := &store.Message{ID: s.AllocMsgID(), Body: []byte{byte(seq)}}
				b.Messages = append(b.Messages, m)
				b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m, DeadLetter: "rejected"})
			}
			storetest.Apply(t, s, &b)
			seqsOf := func(ms []store.EntryMeta) []uint64 {
				var out []uint64
				for _, m := range ms {
					out = append(out, m.Seq)
				}
				return out
			}
			all, err := rg.ReadBacklog(true, 2, 5)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := seqsOf(all), []uint64{2, 3, 4, 5, 6}; !slices.Equal(got, want) {
				t.Fatalf("merged backlog from 2, max 5: %v, want %v", got, want)
			}
			durable, err := rg.ReadBacklog(false, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := seqsOf(durable), []uint64{1, 2, 4, 5, 7, 8}; !slices.Equal(got, want) {
				t.Fatalf("durable backlog only: %v, want %v", got, want)
			}
		})
	}
}

// TestReadDue: the entries refs name come back with their messages, except
// what is gone, waits in a backlog or has no deadline.
func TestReadDue(t *testing.T) {
	for _, ts := range testStores() {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.open(t)
			var b store.Batch
			var refs []store.Ref
			for seq := uint64(1); seq <= 5; seq++ {
				m := &store.Message{ID: s.AllocMsgID(), Body: []byte{byte(seq)}}
				e := store.Entry{Ref: store.Ref{Queue: 9, Seq: seq}, Msg: m, Deadline: 1000 + int64(seq)}
				switch seq {
				case 2:
					e.Deadline = 0
				case 4:
					e.DeadLetter = "expired"
				}
				b.Messages = append(b.Messages, m)
				b.Puts = append(b.Puts, e)
				refs = append(refs, e.Ref)
			}
			storetest.Apply(t, s, &b)
			storetest.Apply(t, s, &store.Batch{Deletes: []store.Ref{refs[2]}}) // seq 3 is gone
			metas, msgs, err := ReadDue(s, refs)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for i, m := range metas {
				got = append(got, m.Seq)
				if msgs[i].Body[0] != byte(m.Seq) || m.Deadline != 1000+int64(m.Seq) {
					t.Fatalf("seq %d read with body %v deadline %d", m.Seq, msgs[i].Body, m.Deadline)
				}
			}
			if want := []uint64{1, 5}; !slices.Equal(got, want) {
				t.Fatalf("due entries %v, want %v", got, want)
			}
		})
	}
}

// deletingStore deletes del (with its message, its only entry) just
// before the first LoadMessages: an entry acked or expired by the queue
// while a read runs without the queue's lock, between the read of the
// entries and the load of their messages.
type deletingStore struct {
	store.Store
	t    *testing.T
	del  store.Ref
	done bool
}

func (s *deletingStore) LoadMessages(ids []store.MsgID, fn func(int, *store.Message)) error {
	if !s.done {
		s.done = true
		storetest.Apply(s.t, s.Store, &store.Batch{Deletes: []store.Ref{s.del}})
		if ck, ok := s.Store.(*diskstore.Store); ok {
			if err := ck.Checkpoint(); err != nil { // the disk store forgets the message only then
				s.t.Fatal(err)
			}
		}
	}
	return s.Store.LoadMessages(ids, fn)
}

// An entry deleted between ReadDue's or ReadMiddle's read of the entries
// and their load of the messages is left out, not reported as a store
// failure (an expiry read on the memory store failed the broker's store
// this way under TestConservationUnderRandomInterleavings).
func TestReadsSkipEntriesDeletedBeforeTheirLoad(t *testing.T) {
	for _, ts := range testStores() {
		t.Run(ts.name, func(t *testing.T) {
			for _, how := range []string{"due", "middle"} {
				s := ts.open(t)
				rg := Ranges{Store: s, ID: 11, Durable: true}
				var b store.Batch
				var refs []store.Ref
				for seq := uint64(1); seq <= 3; seq++ {
					m := &store.Message{ID: s.AllocMsgID(), Body: []byte{byte(seq)}}
					e := store.Entry{Ref: store.Ref{Queue: rg.ID, Seq: seq}, Msg: m, Deadline: 1000}
					b.Messages = append(b.Messages, m)
					b.Puts = append(b.Puts, e)
					refs = append(refs, e.Ref)
				}
				storetest.Apply(t, s, &b)
				ds := &deletingStore{Store: s, t: t, del: refs[1]}
				var got []uint64
				if how == "due" {
					metas, _, err := ReadDue(ds, refs)
					if err != nil {
						t.Fatalf("%s: %v", how, err)
					}
					for _, m := range metas {
						got = append(got, m.Seq)
					}
				} else {
					rg.Store = ds
					r, err := rg.ReadMiddle(false, 0, 1, 3, 10, 0, 0, nil)
					if err != nil {
						t.Fatalf("%s: %v", how, err)
					}
					for i, m := range r.Metas {
						if r.Msgs[i].Body[0] != byte(m.Seq) {
							t.Fatalf("%s: seq %d with body %v", how, m.Seq, r.Msgs[i].Body)
						}
						got = append(got, m.Seq)
					}
				}
				if want := []uint64{1, 3}; !slices.Equal(got, want) {
					t.Fatalf("%s: read %v, want %v", how, got, want)
				}
			}
		})
	}
}

// countingStore counts the messages LoadMessages is asked for.
type countingStore struct {
	store.Store
	loaded int
}

func (s *countingStore) LoadMessages(ids []store.MsgID, fn func(int, *store.Message)) error {
	s.loaded += len(ids)
	return s.Store.LoadMessages(ids, fn)
}

// A read bounded in bytes counts properties as well as bodies, the
// message's or the entry's own (a dead-lettered copy's), and loads little
// more than it keeps: a first probe of probeChunk entries when nothing is
// known of their size, then chunks sized by what it has seen, or by the
// caller's estimate (defect: bodies only, so a window of bodiless messages
// with large headers was read whole, 2,048 of them).
func TestReadMiddleBoundsPropertyBytes(t *testing.T) {
	const props, n = 1000, 100
	for _, ts := range testStores() {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.open(t)
			var b store.Batch
			for seq := uint64(1); seq <= n; seq++ {
				raw := make([]byte, props)
				m := &store.Message{ID: s.AllocMsgID(), Header: store.Header{Props: raw}, Body: []byte{byte(seq)}}
				e := store.Entry{Ref: store.Ref{Queue: 5, Seq: seq}, Msg: m}
				if seq%2 == 0 { // a dead-lettered copy: its own header
					m.Header.Props = nil
					e.Header = &store.Header{Props: raw}
				}
				b.Messages = append(b.Messages, m)
				b.Puts = append(b.Puts, e)
			}
			storetest.Apply(t, s, &b)
			for _, c := range []struct {
				per        int64
				want, load int
			}{
				{0, 10, probeChunk + 2}, // the probe, then the 2 more the mean says fit
				{props + 1, 10, 10},     // the estimate is right: one chunk
			} {
				cs := &countingStore{Store: s}
				rg := Ranges{Store: cs, ID: 5, Durable: true}
				r, err := rg.ReadMiddle(false, 0, 1, n, 1000, 10*(props+1), c.per, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got int64
				for i := range r.Metas {
					got += Resident(&r.Metas[i], r.Msgs[i])
					if r.Msgs[i].Body[0] != byte(r.Metas[i].Seq) {
						t.Fatalf("seq %d read with the wrong message", r.Metas[i].Seq)
					}
				}
				if len(r.Metas) != c.want || got != int64(c.want)*(props+1) || r.Done {
					t.Fatalf("per %d: read %d entries holding %d bytes (done %v), want %d holding %d", c.per, len(r.Metas), got, r.Done, c.want, c.want*(props+1))
				}
				if cs.loaded != c.load {
					t.Fatalf("per %d: loaded %d messages, want %d", c.per, cs.loaded, c.load)
				}
			}
		})
	}
}
