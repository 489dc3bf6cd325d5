package diskstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
)

func mustApply(t testing.TB, s store.Store, b *store.Batch) {
	t.Helper()
	errc := make(chan error, 1)
	s.Apply(b, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func queueStates(t *testing.T, s store.Store) string {
	t.Helper()
	var sb strings.Builder
	err := s.Queues(func(q store.QueueID, st store.QueueState) bool {
		fmt.Fprintf(&sb, "%d last=%d", q, st.LastSeq)
		for _, l := range st.Levels {
			fmt.Fprintf(&sb, " %d:%d/%d", l.Prio, l.Count, l.Bytes)
		}
		sb.WriteString("; ")
		return true
	})
	if err != nil {
		t.Fatalf("queues: %v", err)
	}
	return sb.String()
}

func bodyMsg(s *Store, n int) *store.Message {
	return &store.Message{ID: s.AllocMsgID(), Body: []byte(strings.Repeat("x", n)), Persistent: true}
}

// TestCountersIgnoreInvalidChanges: the disk store applies deletes it
// cannot check; a delete of an entry that is not there, a second delete,
// and deletes after the queue was dropped change no counter, in the
// overlay, while a checkpoint runs and in the index.
func TestCountersIgnoreInvalidChanges(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet())
	defer func() { s.Close() }()
	m := bodyMsg(s, 40)
	r := func(q store.QueueID, seq uint64) store.Ref { return store.Ref{Queue: q, Seq: seq} }
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: r(1, 1), Msg: m}, {Ref: r(1, 2), Msg: m}, {Ref: r(2, 1), Msg: m}, {Ref: r(2, 2), Msg: m},
	}})
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, &store.Batch{Deletes: []store.Ref{r(1, 1), r(1, 99)}})
	mustApply(t, s, &store.Batch{Deletes: []store.Ref{r(1, 1)}, Updates: []store.Update{{Ref: r(1, 98), DeliveryCount: 1}}})
	mustApply(t, s, &store.Batch{DropQueues: []store.QueueID{2}})
	mustApply(t, s, &store.Batch{Deletes: []store.Ref{r(2, 1)}, Updates: []store.Update{{Ref: r(2, 2), DeliveryCount: 1}}})
	const want = "1 last=2 0:1/40; "
	check := func(when string) {
		t.Helper()
		if got := queueStates(t, s); got != want {
			t.Fatalf("%s: queues = %q, want %q", when, got, want)
		}
		if got := queueStates(t, s); got != want { // resolved sizes written back
			t.Fatalf("%s: queues again = %q, want %q", when, got, want)
		}
	}
	check("overlay")

	// The same, with the changes in the frozen overlay and more of them
	// in the active one.
	resume := make(chan struct{})
	frozen := make(chan struct{})
	s.cpMu.Lock()
	s.cp.afterFreeze = func() { close(frozen); <-resume }
	s.cpMu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- s.Checkpoint() }()
	<-frozen
	check("frozen")
	mustApply(t, s, &store.Batch{Deletes: []store.Ref{r(1, 1), r(2, 2), r(1, 97)}})
	check("frozen and active")
	close(resume)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s.cpMu.Lock()
	s.cp.afterFreeze = nil
	s.cpMu.Unlock()
	check("checkpointed")
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	check("all in the index")
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet())
	check("reopened")
}

// TestCountersOfReplayedCopies: after a crash, a replayed put of a
// message stored before the last checkpoint (a dead-lettered copy) comes
// from the WAL without its body; its size is read from the index when
// counted, once, and a delete replayed from the WAL is sized the same way.
func TestCountersOfReplayedCopies(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	m, n := bodyMsg(s, 300), bodyMsg(s, 5)
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m, n}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 1, Prio: 1, Seq: 1}, Msg: m}, {Ref: store.Ref{Queue: 1, Prio: 1, Seq: 2}, Msg: n},
	}})
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	h := &store.Header{Exchange: "dlx"}
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Deletes: []store.Ref{{Queue: 1, Prio: 1, Seq: 1}},
		Puts: []store.Entry{{Ref: store.Ref{Queue: 2, Prio: 0, Seq: 1}, Msg: m, Header: h}}})
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	opts.FS = clone
	s = openDir(t, "data", opts)
	defer func() { s.Close() }()
	const want = "1 last=2 1:1/5; 2 last=1 0:1/300; "
	for i := range 2 {
		if got := queueStates(t, s); got != want {
			t.Fatalf("call %d: queues = %q, want %q", i, got, want)
		}
	}
	s.mu.Lock()
	oq := s.active.queues[2]
	unsized, pending := oq.unsized, s.active.queues[1].pending
	for _, m := range s.active.queues[1].dels {
		if m.isPending() {
			pending++ // a mark left pending must be counted too
		}
	}
	s.mu.Unlock()
	if unsized != 0 || pending != 0 {
		t.Fatalf("after Queues: %d unsized puts, %d pending deletes left in the overlay; want them resolved once", unsized, pending)
	}
	ms, err := s.ReadEntries(2, 0, 0, 10, nil)
	if err != nil || len(ms) != 1 || ms[0].Size != 300 || ms[0].Msg != m.ID || ms[0].Header == nil || ms[0].Header.Exchange != "dlx" {
		t.Fatalf("read replayed copy = %+v, %v", ms, err)
	}
}

// TestUpgradeVersion1QueueStates: an index written before level counters
// (queue state version 1: LastSeq only) gets them counted once at open,
// and the WAL replayed after that counts on top.
func TestUpgradeVersion1QueueStates(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	var b store.Batch
	for seq := uint64(1); seq <= 10; seq++ {
		m := bodyMsg(s, int(seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Prio: uint8(seq % 2), Seq: seq}, Msg: m})
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 2, Prio: 0, Seq: seq}, Msg: m})
	}
	mustApply(t, s, &b)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	m := bodyMsg(s, 100)
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Prio: 0, Seq: 11}, Msg: m}},
		Deletes: []store.Ref{{Queue: 1, Prio: 1, Seq: 1}}})
	clone := fs.CrashClone(vfs.CrashCloneCfg{}) // the last batch is in the WAL only
	s.Close()

	// Rewrite queue 1's state as an older build wrote it.
	db, err := pebble.Open("data/index", index.Options(clone, 0))
	if err != nil {
		t.Fatal(err)
	}
	v1 := []byte{0x31, 10} // index format 0x31: queue state version 1, last seq 10
	if index.QueueStateHasLevels(v1) {
		t.Fatal("test value is not a version 1 queue state")
	}
	if err := db.Set(index.QueueStateKey(nil, 1), v1, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	opts.FS = clone
	s = openDir(t, "data", opts)
	defer func() { s.Close() }()
	// Queue 1: level 0 holds 2, 4, ..., 10 and 11; level 1 holds 3, 5, 7, 9.
	const want = "1 last=11 0:6/130 1:4/24; 2 last=10 0:10/55; "
	if got := queueStates(t, s); got != want {
		t.Fatalf("queues = %q, want %q", got, want)
	}
	raw, closer, err := s.db.Get(index.QueueStateKey(nil, 1))
	if err != nil {
		t.Fatal(err)
	}
	has := index.QueueStateHasLevels(raw)
	closer.Close()
	if !has {
		t.Fatal("the version 1 state was not rewritten at open")
	}
}

// TestReadEntriesReadsNoBodies: window reads and counters of entries
// whose bodies are in segments read no segment block; LoadMessages does.
func TestReadEntriesReadsNoBodies(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet())
	defer s.Close()
	var b store.Batch
	for seq := uint64(1); seq <= 100; seq++ {
		m := bodyMsg(s, 1000)
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Seq: seq}, Msg: m})
	}
	mustApply(t, s, &b)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	blockReads := func() int64 { st := s.segs.CacheStats(); return st.Hits + st.Misses }
	before := blockReads()
	ms, err := s.ReadEntries(1, 0, 50, 20, nil)
	if err != nil || len(ms) != 20 || ms[0].Seq != 50 || ms[19].Seq != 69 || ms[0].Size != 1000 {
		t.Fatalf("read entries = %d entries, %v", len(ms), err)
	}
	if got := queueStates(t, s); got != "1 last=100 0:100/100000; " {
		t.Fatalf("queues = %q", got)
	}
	if after := blockReads(); after != before {
		t.Fatalf("ReadEntries and Queues read %d segment blocks", after-before)
	}
	ids := []store.MsgID{ms[0].Msg, ms[1].Msg}
	var bodies int
	if err := s.LoadMessages(ids, func(_ int, m *store.Message) { bodies += len(m.Body) }); err != nil {
		t.Fatal(err)
	}
	if bodies != 2000 || blockReads() == before {
		t.Fatalf("LoadMessages: %d body bytes, block reads %d -> %d", bodies, before, blockReads())
	}
}

// TestOverlayForgetsUnreferencedMessages: a message of the overlay stays
// in it while an entry refers to it (across a dead-letter move, and while
// one of two copies is left) and leaves once none does; what is left is
// checkpointed and read back whole, and what left is in no segment.
func TestOverlayForgetsUnreferencedMessages(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet())
	defer func() { s.Close() }()
	held := func(m *store.Message) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		if om := s.active.msgs[m.ID]; om != nil {
			return om.refs
		}
		return 0
	}
	ref := func(q store.QueueID, seq uint64) store.Ref { return store.Ref{Queue: q, Seq: seq} }
	a, b, c := bodyMsg(s, 10), bodyMsg(s, 20), bodyMsg(s, 30)
	mustApply(t, s, &store.Batch{Messages: []*store.Message{a}, Puts: []store.Entry{{Ref: ref(1, 1), Msg: a}}})
	mustApply(t, s, &store.Batch{Messages: []*store.Message{b, c}, Puts: []store.Entry{
		{Ref: ref(1, 2), Msg: b}, {Ref: ref(1, 3), Msg: c}, {Ref: ref(2, 1), Msg: c},
	}})
	// a is dead-lettered from queue 1 to queue 3: a put and a delete in one batch.
	mustApply(t, s, &store.Batch{Messages: []*store.Message{a}, Puts: []store.Entry{{Ref: ref(3, 1), Msg: a, Header: &store.Header{Exchange: "dlx"}}},
		Deletes: []store.Ref{ref(1, 1)}})
	if got := held(a); got != 1 {
		t.Fatalf("after the move a has %d references in the overlay, want 1", got)
	}
	mustApply(t, s, &store.Batch{Deletes: []store.Ref{ref(3, 1), ref(1, 2), ref(1, 3)}})
	if got := held(a) + held(b); got != 0 {
		t.Fatalf("a and b are still held (%d references) with no entry left", got)
	}
	if got := held(c); got != 1 {
		t.Fatalf("c, left in queue 2, has %d references, want 1", got)
	}
	s.mu.Lock()
	n := len(s.active.msgs)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("the overlay holds %d messages, want only c", n)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := s.LoadMessages([]store.MsgID{c.ID}, func(_ int, m *store.Message) { got = append(got, string(m.Body)) })
	if err != nil || len(got) != 1 || got[0] != string(c.Body) {
		t.Fatalf("c read back as %q, %v", got, err)
	}
	for _, m := range []*store.Message{a, b} {
		if err := s.LoadMessages([]store.MsgID{m.ID}, func(int, *store.Message) {}); !errors.Is(err, store.ErrUnknownMessage) {
			t.Fatalf("message %d, acked before the checkpoint: %v, want ErrUnknownMessage", m.ID, err)
		}
	}
	if got := queueStates(t, s); got != "1 last=3; 2 last=1 0:1/30; 3 last=1; " {
		t.Fatalf("queues = %q", got)
	}
}
