package diskstore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
)

// Volatile queues (store.VolatileQueue): a batch that changes only them is
// a Volatile WAL record, not recovered from the WAL, and neither are a
// durable batch's changes to them; the ids such records used are never
// handed out again; what a checkpoint moved into the index is listed (the
// broker drops it).
func TestVolatileQueues(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	apply := func(b *store.Batch) {
		t.Helper()
		ch := make(chan error, 1)
		s.Apply(b, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	msg := func(body string) *store.Message {
		return &store.Message{ID: s.AllocMsgID(), Body: []byte(body), Persistent: true}
	}
	put := func(q store.QueueID, seq uint64, m *store.Message) *store.Batch {
		return &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m}}}
	}
	const d = store.QueueID(1)
	const v = store.VolatileQueue | 1
	a := msg("durable a")
	apply(put(d, 1, a))
	apply(put(v, 1, msg("volatile b")))
	// A durable record that also changes the volatile queue.
	c := msg("durable c")
	mixed := put(d, 2, c)
	mixed.Deletes = []store.Ref{{Queue: v, Seq: 1}}
	apply(mixed)
	g := msg("durable g")
	e := msg("volatile e") // the highest id, used by a volatile record only
	apply(put(v, 2, e))
	apply(put(d, 3, g)) // its fsync covers e's record too
	if got, err := s.ReadEntries(v, 0, 0, 10, nil); err != nil || len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("volatile queue while running: %v %v, want seq 2", got, err)
	}

	listed := func(s *Store) map[store.QueueID]int64 {
		t.Helper()
		out := map[store.QueueID]int64{}
		if err := s.Queues(func(q store.QueueID, st store.QueueState) bool {
			for _, l := range st.Levels {
				out[q] += l.Count
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	check := func(s *Store, wantV int64) {
		t.Helper()
		got, err := s.ReadEntries(d, 0, 0, 10, nil)
		if err != nil || len(got) != 3 {
			t.Fatalf("durable queue: %v %v, want 3 entries", got, err)
		}
		if err := s.LoadMessages([]store.MsgID{a.ID, c.ID, g.ID}, func(int, *store.Message) {}); err != nil {
			t.Fatal(err)
		}
		if n := listed(s)[v]; n != wantV {
			t.Fatalf("volatile queue lists %d entries, want %d", n, wantV)
		}
		if id := s.AllocMsgID(); id <= e.ID {
			t.Fatalf("AllocMsgID after reopen = %d: a volatile record on disk used %d", id, e.ID)
		}
	}

	// Power loss with every record on disk and none checkpointed: the
	// durable ones are recovered, no volatile change is.
	crash := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.FS = crash
	s2 := openDir(t, "data", opts)
	check(s2, 0)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// A clean restart: Close checkpointed, so the volatile entry is in the
	// index, listed for the broker to drop.
	opts.FS = fs
	s = openDir(t, "data", opts)
	defer s.Close()
	check(s, 1)
	apply(&store.Batch{DropQueues: []store.QueueID{v}})
	if n, ok := listed(s)[v]; ok {
		t.Fatalf("dropped volatile queue still lists %d entries", n)
	}
}
