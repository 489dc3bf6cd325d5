package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/store"
)

// The reads a paging queue uses: Queues (counters without entries),
// ReadEntries (metadata windows) and LoadMessages (bodies by id).

func pagingCases() []struct {
	name string
	fn   func(*testing.T, Opener, Reopener)
} {
	return []struct {
		name string
		fn   func(*testing.T, Opener, Reopener)
	}{
		{"QueueStateCounts", testQueueStateCounts},
		{"QueueStateDeadLetterAndDrop", testQueueStateDeadLetterAndDrop},
		{"QueueStateUnknownDelete", testQueueStateUnknownDelete},
		{"ReadEntriesWindows", testReadEntriesWindows},
		{"ReadEntriesOverlayAndIndex", testReadEntriesOverlayAndIndex},
		{"ReadEntriesMetadata", testReadEntriesMetadata},
		{"LoadMessages", testLoadMessages},
		{"PagingReadsClosed", testPagingReadsClosed},
	}
}

// sized is a new message with an n-byte body.
func sized(s store.Store, n int) *store.Message {
	return newMsg(s, strings.Repeat("b", n))
}

func put(q store.QueueID, prio uint8, seq uint64, m *store.Message) store.Entry {
	return store.Entry{Ref: store.Ref{Queue: q, Prio: prio, Seq: seq}, Msg: m}
}

// queues returns Queues' answer as "q last=L p:count/bytes ..." lines.
func queues(t *testing.T, s store.Store) []string {
	t.Helper()
	var out []string
	err := s.Queues(func(q store.QueueID, st store.QueueState) bool {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%d last=%d", q, st.LastSeq)
		for _, l := range st.Levels {
			fmt.Fprintf(&sb, " %d:%d/%d", l.Prio, l.Count, l.Bytes)
		}
		out = append(out, sb.String())
		return true
	})
	if err != nil {
		t.Fatalf("queues: %v", err)
	}
	return out
}

// window returns ReadEntries' answer as "seq@prio:msg/size" items.
func window(t *testing.T, s store.Store, q store.QueueID, prio uint8, from uint64, max int) []string {
	t.Helper()
	ms, err := s.ReadEntries(q, prio, from, max, nil)
	if err != nil {
		t.Fatalf("read entries %d/%d from %d: %v", q, prio, from, err)
	}
	if len(ms) > max {
		t.Fatalf("read entries %d/%d from %d max %d: %d entries", q, prio, from, max, len(ms))
	}
	var out []string
	for _, m := range ms {
		if m.Queue != q || m.Prio != prio {
			t.Fatalf("read entries %d/%d returned an entry of %d/%d", q, prio, m.Queue, m.Prio)
		}
		out = append(out, fmt.Sprintf("%d:%d", m.Seq, m.Size))
	}
	return out
}

// testQueueStateCounts: counts and bytes per level follow puts, deletes
// and updates (which change nothing), and survive a restart; a queue whose
// entries are all gone keeps its LastSeq.
func testQueueStateCounts(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	expect(t, "empty store", queues(t, s), nil)
	a, b, c, d := sized(s, 10), sized(s, 200), sized(s, 0), sized(s, 3000)
	Apply(t, s, &store.Batch{Messages: []*store.Message{a, b, c, d}, Puts: []store.Entry{
		put(5, 0, 1, a), put(5, 0, 2, b), put(5, 3, 3, c), put(5, 9, 4, d), put(5, 3, 5, a),
		put(2, 0, 1, d),
	}})
	want := []string{"2 last=1 0:1/3000", "5 last=5 0:2/210 3:2/10 9:1/3000"}
	expect(t, "after puts", queues(t, s), want)
	Apply(t, s, &store.Batch{Updates: []store.Update{{Ref: store.Ref{Queue: 5, Prio: 9, Seq: 4}, DeliveryCount: 2}}})
	expect(t, "after update", queues(t, s), want)
	s = reopen(t, s)
	expect(t, "after reopen", queues(t, s), want)

	// Deletes of entries stored before the restart and of new ones.
	e := sized(s, 7)
	Apply(t, s, &store.Batch{Messages: []*store.Message{e}, Puts: []store.Entry{put(5, 3, 6, e), put(5, 3, 7, e)}})
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 5, Prio: 0, Seq: 2}, {Queue: 5, Prio: 3, Seq: 6}, {Queue: 2, Prio: 0, Seq: 1}}})
	want = []string{"2 last=1", "5 last=7 0:1/10 3:3/17 9:1/3000"}
	expect(t, "after deletes", queues(t, s), want)
	s = reopen(t, s)
	expect(t, "after deletes and reopen", queues(t, s), want)

	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 5, Prio: 9, Seq: 4}, {Queue: 5, Prio: 0, Seq: 1}}})
	want = []string{"2 last=1", "5 last=7 3:3/17"}
	expect(t, "after emptying levels", queues(t, s), want)

	// fn returning false stops the walk.
	n := 0
	if err := s.Queues(func(store.QueueID, store.QueueState) bool { n++; return false }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("Queues called fn %d times after it returned false", n)
	}
	s = reopen(t, s)
	defer s.Close()
	expect(t, "at the end", queues(t, s), want)
}

// testQueueStateDeadLetterAndDrop: a dead-letter move is a delete and puts
// of the same message; DropQueues forgets the queue.
func testQueueStateDeadLetterAndDrop(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m, m2 := sized(s, 100), sized(s, 50)
	Apply(t, s, &store.Batch{Messages: []*store.Message{m, m2}, Puts: []store.Entry{put(1, 2, 1, m), put(1, 2, 2, m2)}})
	s = reopen(t, s) // the source entry is an older one from now on
	h := &store.Header{Exchange: "dlx", RoutingKeys: []string{"dead"}}
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Deletes: []store.Ref{{Queue: 1, Prio: 2, Seq: 1}}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 3, Prio: 0, Seq: 1}, Msg: m, Header: h},
		{Ref: store.Ref{Queue: 4, Prio: 1, Seq: 8}, Msg: m, Header: h},
	}})
	want := []string{"1 last=2 2:1/50", "3 last=1 0:1/100", "4 last=8 1:1/100"}
	expect(t, "after dead-lettering", queues(t, s), want)
	s = reopen(t, s)
	expect(t, "after dead-lettering and reopen", queues(t, s), want)

	// Dead-letter a copy again, from a target that was itself a target.
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Deletes: []store.Ref{{Queue: 3, Prio: 0, Seq: 1}}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 4, Prio: 1, Seq: 9}, Msg: m, Header: h},
	}})
	want = []string{"1 last=2 2:1/50", "3 last=1", "4 last=9 1:2/200"}
	expect(t, "after a second move", queues(t, s), want)

	Apply(t, s, &store.Batch{DropQueues: []store.QueueID{4, 3}})
	want = []string{"1 last=2 2:1/50"}
	expect(t, "after drop", queues(t, s), want)
	s = reopen(t, s)
	expect(t, "after drop and reopen", queues(t, s), want)
	// A queue dropped with entries stored before and after a restart.
	n := sized(s, 9)
	Apply(t, s, &store.Batch{Messages: []*store.Message{n}, Puts: []store.Entry{put(1, 2, 3, n)}})
	Apply(t, s, &store.Batch{DropQueues: []store.QueueID{1}})
	expect(t, "after dropping the last queue", queues(t, s), nil)
	s = reopen(t, s)
	defer s.Close()
	expect(t, "empty after reopen", queues(t, s), nil)
}

// testQueueStateUnknownDelete: a delete of an entry that does not exist
// is refused (a validating store) or changes nothing, counters included.
func testQueueStateUnknownDelete(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := sized(s, 30)
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{put(1, 0, 1, m)}})
	s = reopen(t, s)
	err := applyErr(s, &store.Batch{Deletes: []store.Ref{{Queue: 1, Prio: 0, Seq: 99}}})
	if errors.Is(err, store.ErrInvalidBatch) {
		s.Close()
		return
	}
	if err != nil {
		t.Fatalf("apply an unknown delete: %v", err)
	}
	want := []string{"1 last=1 0:1/30"}
	expect(t, "after an unknown delete", queues(t, s), want)
	s = reopen(t, s)
	defer s.Close()
	expect(t, "after an unknown delete and reopen", queues(t, s), want)
}

// testReadEntriesWindows: windows of one level, in seq order, from a seq,
// at most max, across deletes; other levels and queues are not mixed in.
func testReadEntriesWindows(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	var b store.Batch
	for seq := uint64(1); seq <= 40; seq++ {
		m := sized(s, int(seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, put(3, uint8(seq%3), seq, m))
	}
	m := sized(s, 1)
	b.Messages = append(b.Messages, m)
	b.Puts = append(b.Puts, put(4, 0, 1, m), put(2, 0, 100, m))
	Apply(t, s, &b)
	// Level 0 holds 3, 6, ..., 39; level 1 holds 1, 4, ..., 40.
	level0 := func(from, to uint64) []string {
		var out []string
		for seq := max(from, 1); seq <= to; seq++ {
			if seq%3 == 0 {
				out = append(out, fmt.Sprintf("%d:%d", seq, seq))
			}
		}
		return out
	}
	check := func(when string) {
		t.Helper()
		expect(t, when+": level 0 first window", window(t, s, 3, 0, 0, 4), level0(0, 12))
		expect(t, when+": level 0 next window", window(t, s, 3, 0, 13, 4), level0(13, 24))
		expect(t, when+": level 0 from inside", window(t, s, 3, 0, 37, 4), level0(37, 40))
		expect(t, when+": level 0 from an entry", window(t, s, 3, 0, 36, 2), level0(36, 39))
		expect(t, when+": level 0 past the end", window(t, s, 3, 0, 41, 4), nil)
		expect(t, when+": level 1 whole", window(t, s, 3, 1, 0, 100), []string{
			"1:1", "4:4", "7:7", "10:10", "13:13", "16:16", "19:19", "22:22", "25:25", "28:28", "31:31", "34:34", "37:37", "40:40"})
		expect(t, when+": max 0", window(t, s, 3, 1, 0, 0), nil)
		expect(t, when+": empty level", window(t, s, 3, 7, 0, 10), nil)
		expect(t, when+": unknown queue", window(t, s, 9, 0, 0, 10), nil)
		expect(t, when+": neighbour queue", window(t, s, 4, 0, 0, 10), []string{"1:1"})
	}
	check("after puts")
	s = reopen(t, s)
	check("after reopen")

	// Delete the head of level 0, one in its middle, all of level 2.
	var del []store.Ref
	for seq := uint64(1); seq <= 40; seq++ {
		if seq%3 == 2 || seq == 3 || seq == 6 || seq == 18 {
			del = append(del, store.Ref{Queue: 3, Prio: uint8(seq % 3), Seq: seq})
		}
	}
	Apply(t, s, &store.Batch{Deletes: del})
	checkDeleted := func(when string) {
		t.Helper()
		expect(t, when+": level 0 head", window(t, s, 3, 0, 0, 3), []string{"9:9", "12:12", "15:15"})
		expect(t, when+": level 0 across a gap", window(t, s, 3, 0, 16, 3), []string{"21:21", "24:24", "27:27"})
		expect(t, when+": level 2", window(t, s, 3, 2, 0, 100), nil)
		expect(t, when+": level 1 untouched", window(t, s, 3, 1, 38, 100), []string{"40:40"})
	}
	checkDeleted("after deletes")
	s = reopen(t, s)
	defer s.Close()
	checkDeleted("after deletes and reopen")

	// dst is appended to.
	pre := []store.EntryMeta{{Ref: store.Ref{Queue: 77}}}
	got, err := s.ReadEntries(3, 0, 0, 2, pre)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Queue != 77 || got[1].Seq != 9 || got[2].Seq != 12 {
		t.Fatalf("ReadEntries appended %+v to one entry", got)
	}
}

// testReadEntriesOverlayAndIndex: a level whose entries are partly from
// before a restart (a disk store's index) and partly new (its overlay),
// with new deletes and updates of old entries, reads as one sequence.
func testReadEntriesOverlayAndIndex(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	var b store.Batch
	for _, seq := range []uint64{1, 3, 5, 7, 9} {
		m := sized(s, 10+int(seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, put(1, 4, seq, m))
	}
	Apply(t, s, &b)
	s = reopen(t, s)
	b = store.Batch{}
	for _, seq := range []uint64{10, 11, 12} {
		m := sized(s, 10+int(seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, put(1, 4, seq, m))
	}
	Apply(t, s, &b)
	Apply(t, s, &store.Batch{
		Deletes: []store.Ref{{Queue: 1, Prio: 4, Seq: 3}, {Queue: 1, Prio: 4, Seq: 11}},
		Updates: []store.Update{{Ref: store.Ref{Queue: 1, Prio: 4, Seq: 5}, DeliveryCount: 4}, {Ref: store.Ref{Queue: 1, Prio: 4, Seq: 12}, DeliveryCount: 1}},
	})
	want := []string{"1:11 dc=0", "5:15 dc=4", "7:17 dc=0", "9:19 dc=0", "10:20 dc=0", "12:22 dc=1"}
	read := func(from uint64, max int) []string {
		ms, err := s.ReadEntries(1, 4, from, max, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%d:%d dc=%d", m.Seq, m.Size, m.DeliveryCount))
		}
		return out
	}
	check := func(when string) {
		t.Helper()
		expect(t, when+": whole level", read(0, 100), want)
		// Every window size walks the same sequence.
		for max := 1; max <= 4; max++ {
			var got []string
			from := uint64(0)
			for {
				w := read(from, max)
				got = append(got, w...)
				if len(w) < max {
					break
				}
				var last uint64
				fmt.Sscanf(w[len(w)-1], "%d:", &last)
				from = last + 1
			}
			expect(t, fmt.Sprintf("%s: windows of %d", when, max), got, want)
		}
		expect(t, when+": from a deleted seq", read(3, 2), want[1:3])
		expect(t, when+": from the new part", read(10, 5), want[4:])
		// ReadRefs: the named entries that exist, in the order named.
		var refs []store.Ref
		for _, seq := range []uint64{12, 1, 3, 5, 7, 9, 10, 11, 13} {
			refs = append(refs, store.Ref{Queue: 1, Prio: 4, Seq: seq})
		}
		refs = append(refs, store.Ref{Queue: 1, Prio: 0, Seq: 1}, store.Ref{Queue: 2, Prio: 4, Seq: 1})
		ms, err := s.ReadRefs(refs, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, fmt.Sprintf("%d:%d dc=%d", m.Seq, m.Size, m.DeliveryCount))
		}
		expect(t, when+": ReadRefs", got, append([]string{want[5]}, want[:5]...))
	}
	check("mixed")
	expect(t, "counters", queues(t, s), []string{"1 last=12 4:6/104"})
	s = reopen(t, s)
	defer s.Close()
	check("after reopen")
}

// testReadEntriesMetadata: every field of an entry comes back, its own
// header and its origin included, without the body.
func testReadEntriesMetadata(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := sized(s, 123)
	h := &store.Header{Exchange: "dlx", RoutingKeys: []string{"dead", "cc"}, Props: []byte{0x20, 0x00, 9, 0xff}}
	o := store.Origin{Queue: "src", Reason: "rejected", At: 3999}
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 6, Prio: 1, Seq: 1}, Msg: m, Deadline: 5000},
		{Ref: store.Ref{Queue: 6, Prio: 1, Seq: 2}, Msg: m, Header: h, DeadLetter: "expired", DeadAt: 4000, DeliveryCount: 3, Origin: &o},
	}})
	check := func(when string) {
		t.Helper()
		ms, err := s.ReadEntries(6, 1, 0, 10, nil)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if len(ms) != 2 {
			t.Fatalf("%s: %d entries, want 2", when, len(ms))
		}
		a, b := ms[0], ms[1]
		if a.Ref != (store.Ref{Queue: 6, Prio: 1, Seq: 1}) || a.Msg != m.ID || a.Size != 123 || a.Deadline != 5000 ||
			a.DeliveryCount != 0 || a.DeadLetter != "" || a.DeadAt != 0 || a.Header != nil || a.Origin != nil {
			t.Fatalf("%s: first entry = %+v", when, a)
		}
		if b.Ref != (store.Ref{Queue: 6, Prio: 1, Seq: 2}) || b.Msg != m.ID || b.Size != 123 || b.Deadline != 0 ||
			b.DeliveryCount != 3 || b.DeadLetter != "expired" || b.DeadAt != 4000 || b.Header == nil {
			t.Fatalf("%s: second entry = %+v", when, b)
		}
		if b.Header.Exchange != h.Exchange || !slices.Equal(b.Header.RoutingKeys, h.RoutingKeys) || string(b.Header.Props) != string(h.Props) {
			t.Fatalf("%s: header = %+v, want %+v", when, b.Header, h)
		}
		if b.Origin == nil || *b.Origin != o {
			t.Fatalf("%s: origin = %v, want %+v", when, b.Origin, o)
		}
	}
	check("fresh")
	s = reopen(t, s)
	defer s.Close()
	check("after reopen")
}

// testLoadMessages: bodies and headers exact, from before and after a
// restart; an id listed twice (a shared message) is one *Message; an
// unknown id fails the call before fn runs.
func testLoadMessages(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	old := newMsg(s, "stored before the restart")
	old.Header = store.Header{Exchange: "ex", RoutingKeys: []string{"a", "b"}, Props: []byte{0x80, 0x00, 1, 2, 3}}
	gone := newMsg(s, "acked")
	Apply(t, s, &store.Batch{Messages: []*store.Message{old, gone}, Puts: []store.Entry{put(1, 0, 1, old), put(2, 0, 1, old), put(1, 0, 2, gone)}})
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 1, Prio: 0, Seq: 2}}})
	s = reopen(t, s)
	fresh := newMsg(s, "")
	fresh.Persistent = false
	Apply(t, s, &store.Batch{Messages: []*store.Message{fresh}, Puts: []store.Entry{put(3, 0, 1, fresh)}})

	load := func(ids ...store.MsgID) ([]*store.Message, error) {
		got := make([]*store.Message, len(ids))
		calls := 0
		err := s.LoadMessages(ids, func(i int, m *store.Message) {
			if got[i] != nil {
				t.Fatalf("fn called twice for index %d", i)
			}
			got[i] = m
			calls++
		})
		if err == nil && calls != len(ids) {
			t.Fatalf("fn called %d times for %d ids", calls, len(ids))
		}
		if err != nil && calls != 0 {
			t.Fatalf("fn called %d times before the error %v", calls, err)
		}
		return got, err
	}
	same := func(what string, got, want *store.Message) {
		t.Helper()
		if got == nil || got.ID != want.ID || string(got.Body) != string(want.Body) || got.Persistent != want.Persistent ||
			got.Header.Exchange != want.Header.Exchange || !slices.Equal(got.Header.RoutingKeys, want.Header.RoutingKeys) ||
			string(got.Header.Props) != string(want.Header.Props) {
			t.Fatalf("%s = %+v, want %+v", what, got, want)
		}
	}
	check := func(when string) {
		t.Helper()
		got, err := load(old.ID, fresh.ID, old.ID)
		if err != nil {
			t.Fatalf("%s: load: %v", when, err)
		}
		same(when+": stored message", got[0], old)
		same(when+": new message", got[1], fresh)
		if got[2] != got[0] {
			t.Fatalf("%s: a message listed twice came back as two copies", when)
		}
		if got, err := load(); err != nil || len(got) != 0 {
			t.Fatalf("%s: load nothing: %v", when, err)
		}
		for _, id := range []store.MsgID{gone.ID, s.AllocMsgID()} {
			if _, err := load(old.ID, id); !errors.Is(err, store.ErrUnknownMessage) {
				t.Fatalf("%s: load of unknown message %d: %v, want ErrUnknownMessage", when, id, err)
			}
		}
	}
	check("mixed")
	s = reopen(t, s)
	defer s.Close()
	check("after reopen")
}

func testPagingReadsClosed(t *testing.T, open Opener, _ Reopener) {
	s := open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Queues(func(store.QueueID, store.QueueState) bool { return true }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Queues after close: %v", err)
	}
	if _, err := s.ReadEntries(1, 0, 0, 10, nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReadEntries after close: %v", err)
	}
	if err := s.LoadMessages([]store.MsgID{1}, func(int, *store.Message) {}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("LoadMessages after close: %v", err)
	}
}
