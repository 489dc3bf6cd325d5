package memstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
)

// TestLevelIndex drives one queue's level index through the paths its
// lazy deletion takes (acks at the head, deletes in the middle, puts out
// of seq order, compaction) and checks every window and counter against
// the entries ScanQueue sees.
func TestLevelIndex(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const q = store.QueueID(1)
	live := make(map[uint64]store.Ref)
	var next, last uint64 = 1000, 0
	apply := func(b *store.Batch) {
		t.Helper()
		var err error
		s.Apply(b, func(e error) { err = e })
		if err != nil {
			t.Fatal(err)
		}
	}
	sorted := func() []store.Ref {
		refs := make([]store.Ref, 0, len(live))
		for _, r := range live {
			refs = append(refs, r)
		}
		slices.SortFunc(refs, func(a, b store.Ref) int { return int(a.Seq) - int(b.Seq) })
		return refs
	}
	check := func(step int) {
		t.Helper()
		want := make(map[uint8][]uint64)
		var bytes [4]int64
		err := s.ScanQueue(q, 0, func(e *store.Entry) bool {
			want[e.Prio] = append(want[e.Prio], e.Seq)
			bytes[e.Prio] += int64(len(e.Msg.Body))
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		var st store.QueueState
		_ = s.Queues(func(id store.QueueID, x store.QueueState) bool {
			if id == q {
				st = x
			}
			return true
		})
		for prio := range uint8(4) {
			var got []uint64
			from0 := uint64(rng.IntN(50)) // usually below every seq; now and then past a few
			from := from0
			for {
				ms, err := s.ReadEntries(q, prio, from, 1+rng.IntN(7), nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) == 0 {
					break
				}
				for _, m := range ms {
					got = append(got, m.Seq)
				}
				from = ms[len(ms)-1].Seq + 1
			}
			w := slices.DeleteFunc(slices.Clone(want[prio]), func(seq uint64) bool { return seq < from0 })
			if !slices.Equal(got, w) {
				t.Fatalf("step %d level %d: windows %v, want %v", step, prio, got, w)
			}
			var l store.LevelState
			for _, x := range st.Levels {
				if x.Prio == prio {
					l = x
				}
			}
			if l.Count != int64(len(want[prio])) || l.Bytes != bytes[prio] {
				t.Fatalf("step %d level %d: state %+v, want %d entries / %d bytes", step, prio, l, len(want[prio]), bytes[prio])
			}
		}
	}
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 4 || len(live) < 10: // put, now and then below the newest seq
			var b store.Batch
			for range 1 + rng.IntN(20) {
				seq := next
				next++
				if rng.IntN(8) == 0 {
					seq = uint64(rng.IntN(int(next)))
					if _, ok := live[seq]; ok {
						continue
					}
				}
				m := &store.Message{ID: s.AllocMsgID(), Body: make([]byte, rng.IntN(50))}
				r := store.Ref{Queue: q, Prio: uint8(rng.IntN(4)), Seq: seq}
				b.Messages = append(b.Messages, m)
				b.Puts = append(b.Puts, store.Entry{Ref: r, Msg: m})
				live[seq] = r
				last = max(last, seq)
			}
			apply(&b)
		case op < 8: // acks at the head of a level
			refs := sorted()
			var b store.Batch
			prio := uint8(rng.IntN(4))
			for _, r := range refs {
				if r.Prio == prio && len(b.Deletes) < 1+rng.IntN(15) {
					b.Deletes = append(b.Deletes, r)
					delete(live, r.Seq)
				}
			}
			apply(&b)
		default: // deletes anywhere
			refs := sorted()
			var b store.Batch
			for range 1 + rng.IntN(15) {
				r := refs[rng.IntN(len(refs))]
				if _, ok := live[r.Seq]; ok {
					b.Deletes = append(b.Deletes, r)
					delete(live, r.Seq)
				}
			}
			apply(&b)
		}
		if step%50 == 0 {
			check(step)
		}
	}
	check(3000)
	// Empty every level: the queue keeps its LastSeq only.
	var b store.Batch
	for _, r := range live {
		b.Deletes = append(b.Deletes, r)
	}
	apply(&b)
	var got []string
	_ = s.Queues(func(id store.QueueID, st store.QueueState) bool {
		got = append(got, fmt.Sprintf("%d %d %d", id, st.LastSeq, len(st.Levels)))
		return true
	})
	if want := fmt.Sprintf("%d %d 0", q, last); len(got) != 1 || got[0] != want {
		t.Fatalf("emptied queue: %q, want %q", got, want)
	}
}

// TestLevelHeadAcks: acks at the head of a long level release the slots
// in front and leave the rest readable.
func TestLevelHeadAcks(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	m := &store.Message{ID: s.AllocMsgID(), Body: []byte("12345")}
	var b store.Batch
	b.Messages = []*store.Message{m}
	for seq := uint64(1); seq <= 3000; seq++ {
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Seq: seq}, Msg: m})
	}
	s.Apply(&b, nil)
	for seq := uint64(1); seq <= 2500; seq++ {
		s.Apply(&store.Batch{Deletes: []store.Ref{{Queue: 1, Seq: seq}}}, nil)
	}
	ms, err := s.ReadEntries(1, 0, 0, 3, nil)
	if err != nil || len(ms) != 3 || ms[0].Seq != 2501 || ms[2].Seq != 2503 || ms[0].Size != 5 {
		t.Fatalf("window after head acks = %+v, %v", ms, err)
	}
	var st store.QueueState
	_ = s.Queues(func(_ store.QueueID, x store.QueueState) bool { st = x; return false })
	if st.LastSeq != 3000 || len(st.Levels) != 1 || st.Levels[0].Count != 500 || st.Levels[0].Bytes != 2500 {
		t.Fatalf("state after head acks = %+v", st)
	}
}
