// Package storetest is the conformance suite every store.Store
// implementation runs: the same cases against the memory store and the disk
// store, so both give the broker the same guarantees.
package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/store"
)

// DeadlineScanner is a store that lists whole entries in deadline order.
// It is not part of store.Store, since the broker reads only DeadlineRefs;
// memstore and diskstore implement it, and the ScanDeadlines case checks it
// of a store that does (and is skipped for one that does not).
type DeadlineScanner interface {
	// ScanDeadlines calls fn for entries with 0 < Deadline <= until, in
	// (Deadline, Queue, Seq) order, until fn returns false.
	ScanDeadlines(until int64, fn func(*store.Entry) bool) error
}

// Opener makes a fresh, empty store for one test.
type Opener func(t *testing.T) store.Store

// Reopener closes s and returns the store as it is after a restart.
type Reopener func(t *testing.T, s store.Store) store.Store

// Run runs every conformance case.
func Run(t *testing.T, open Opener, reopen Reopener) {
	cases := []struct {
		name string
		fn   func(*testing.T, Opener, Reopener)
	}{
		{"ScanQueueOrder", testScanQueueOrder},
		{"SharedMessage", testSharedMessage},
		{"DeadLetterMove", testDeadLetterMove},
		{"InvalidBatchChangesNothing", testInvalidBatch},
		{"UpdateDeliveryCount", testUpdate},
		{"RetryFields", testRetryFields},
		{"DropQueues", testDropQueues},
		{"ScanDeadlines", testScanDeadlines},
		{"DeadlineRefs", testDeadlineRefs},
		{"Meta", testMeta},
		{"Reopen", testReopen},
		{"Closed", testClosed},
		{"DoneCalledOnce", testDoneOnce},
		{"LastSeq", testLastSeq},
		{"PriorityLevels", testPriorityLevels},
		{"ManyBatchesInOrder", testManyBatches},
	}
	cases = append(cases, pagingCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open, reopen) })
	}
}

// Apply applies b to s and waits for its completion; a failure fails the
// test.
func Apply(t testing.TB, s store.Store, b *store.Batch) {
	t.Helper()
	errc := make(chan error, 1)
	s.Apply(b, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func applyErr(s store.Store, b *store.Batch) error {
	errc := make(chan error, 1)
	s.Apply(b, func(err error) { errc <- err })
	return <-errc
}

func newMsg(s store.Store, body string) *store.Message {
	return &store.Message{
		ID:         s.AllocMsgID(),
		Header:     store.Header{Exchange: "x", RoutingKeys: []string{"rk"}, Props: []byte{0x10, 0x00, 2}},
		Body:       []byte(body),
		Persistent: true,
	}
}

// dump returns "seq:body" for every entry of q.
func dump(t *testing.T, s store.Store, q store.QueueID, from uint64) []string {
	t.Helper()
	var out []string
	err := s.ScanQueue(q, from, func(e *store.Entry) bool {
		out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Msg.Body))
		return true
	})
	if err != nil {
		t.Fatalf("scan queue %d: %v", q, err)
	}
	return out
}

func expect(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

func testScanQueueOrder(t *testing.T, open Opener, _ Reopener) {
	s := open(t)
	defer s.Close()
	var b store.Batch
	for _, seq := range []uint64{5, 1, 3, 2, 4} {
		m := newMsg(s, fmt.Sprint("m", seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 7, Seq: seq}, Msg: m})
	}
	Apply(t, s, &b)
	expect(t, "queue 7", dump(t, s, 7, 0), []string{"1:m1", "2:m2", "3:m3", "4:m4", "5:m5"})
	expect(t, "queue 7 from 3", dump(t, s, 7, 3), []string{"3:m3", "4:m4", "5:m5"})
	expect(t, "queue 8", dump(t, s, 8, 0), nil)
	var n int
	if err := s.ScanQueue(7, 0, func(*store.Entry) bool { n++; return n < 2 }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("scan did not stop when fn returned false: %d calls", n)
	}
}

func testSharedMessage(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "shared")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m},
		{Ref: store.Ref{Queue: 2, Seq: 1}, Msg: m},
	}})
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 1, Seq: 1}}})
	s = reopen(t, s)
	defer s.Close()
	expect(t, "queue 1", dump(t, s, 1, 0), nil)
	expect(t, "queue 2", dump(t, s, 2, 0), []string{"1:shared"})
	// The message is still stored: a new entry can refer to it.
	Apply(t, s, &store.Batch{Puts: []store.Entry{{Ref: store.Ref{Queue: 3, Seq: 9}, Msg: m}}})
	expect(t, "queue 3", dump(t, s, 3, 0), []string{"9:shared"})
}

func testDeadLetterMove(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "dl")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 4}, Msg: m, Deadline: 100}}})
	h := &store.Header{Exchange: "dlx", RoutingKeys: []string{"dead"}, Props: []byte{0x20, 0x00, 9}}
	Apply(t, s, &store.Batch{
		Messages: []*store.Message{m}, // already stored: allowed, not written again
		Deletes:  []store.Ref{{Queue: 1, Seq: 4}},
		Puts: []store.Entry{
			{Ref: store.Ref{Queue: 2, Seq: 1}, Msg: m, Header: h},
			{Ref: store.Ref{Queue: 3, Seq: 1}, Msg: m, Header: h},
		},
	})
	s = reopen(t, s)
	defer s.Close()
	expect(t, "source", dump(t, s, 1, 0), nil)
	for _, q := range []store.QueueID{2, 3} {
		var got *store.Entry
		_ = s.ScanQueue(q, 0, func(e *store.Entry) bool { got = e; return false })
		if got == nil {
			t.Fatalf("target %d empty", q)
		}
		eh := got.EffectiveHeader()
		if eh.Exchange != "dlx" || !slices.Equal(eh.RoutingKeys, []string{"dead"}) || string(eh.Props) != string(h.Props) {
			t.Fatalf("target %d header = %+v, want %+v", q, eh, h)
		}
		if got.Msg.Header.Exchange != "x" || string(got.Msg.Body) != "dl" {
			t.Fatalf("target %d message = %+v", q, got.Msg)
		}
		if got.Deadline != 0 {
			t.Fatalf("target %d kept deadline %d", q, got.Deadline)
		}
	}
}

// testInvalidBatch: a store may check a batch against what it holds (the
// memory store does) or apply it unchecked (the disk store: a check would
// cost a read per ack). Either way a bad reference must not corrupt
// anything: if the batch is refused nothing of it is applied and the
// error sticks; if it is accepted its valid part is applied and the
// unknown delete changes nothing.
func testInvalidBatch(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "a")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}})
	m2 := newMsg(s, "b")
	// Valid put of m2 plus a delete of an entry that does not exist.
	err := applyErr(s, &store.Batch{
		Messages: []*store.Message{m2},
		Puts:     []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 2}, Msg: m2}},
		Deletes:  []store.Ref{{Queue: 1, Seq: 99}},
	})
	switch {
	case errors.Is(err, store.ErrInvalidBatch):
		expect(t, "queue 1", dump(t, s, 1, 0), []string{"1:a"})
		if err := applyErr(s, &store.Batch{Meta: []store.MetaOp{{Key: "k", Value: []byte("v")}}}); err == nil {
			t.Fatal("apply after a failed batch succeeded; errors must be sticky")
		}
		s.Close()
	case err == nil:
		expect(t, "queue 1", dump(t, s, 1, 0), []string{"1:a", "2:b"})
		s = reopen(t, s)
		defer s.Close()
		expect(t, "queue 1 after reopen", dump(t, s, 1, 0), []string{"1:a", "2:b"})
	default:
		t.Fatalf("apply batch with an unknown delete: %v, want nil or ErrInvalidBatch", err)
	}
}

func testUpdate(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "u")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}})
	Apply(t, s, &store.Batch{Updates: []store.Update{{Ref: store.Ref{Queue: 1, Seq: 1}, DeliveryCount: 3, DeadLetter: "rejected", DeadAt: 1234}}})
	s = reopen(t, s)
	defer s.Close()
	var got store.Entry
	_ = s.ScanQueue(1, 0, func(e *store.Entry) bool { got = *e; return true })
	if got.DeliveryCount != 3 || got.DeadLetter != "rejected" || got.DeadAt != 1234 {
		t.Fatalf("after update: delivery count %d, dead letter %q at %d; want 3, rejected at 1234", got.DeliveryCount, got.DeadLetter, got.DeadAt)
	}
}

// retryState is an entry's retry fields as every read gives them:
// "seq:dc/ac@readyAt".
func retryState(seq uint64, dc, ac uint32, readyAt int64) string {
	return fmt.Sprintf("%d:%d/%d@%d", seq, dc, ac, readyAt)
}

// retryStates reads q's level 0 every way a store reads entries
// (ScanQueue, ReadEntries, ReadRefs) and fails t unless they agree; it
// returns what they read.
func retryStates(t *testing.T, s store.Store, q store.QueueID) []string {
	t.Helper()
	var scanned, windowed, byRef []string
	var refs []store.Ref
	err := s.ScanQueue(q, 0, func(e *store.Entry) bool {
		scanned = append(scanned, retryState(e.Seq, e.DeliveryCount, e.AcquiredCount, e.ReadyAt))
		refs = append(refs, e.Ref)
		return true
	})
	if err != nil {
		t.Fatalf("scan queue %d: %v", q, err)
	}
	ms, err := s.ReadEntries(q, 0, 0, 100, nil)
	if err != nil {
		t.Fatalf("read entries of %d: %v", q, err)
	}
	for _, m := range ms {
		windowed = append(windowed, retryState(m.Seq, m.DeliveryCount, m.AcquiredCount, m.ReadyAt))
	}
	ms, err = s.ReadRefs(refs, nil)
	if err != nil {
		t.Fatalf("read refs of %d: %v", q, err)
	}
	for _, m := range ms {
		byRef = append(byRef, retryState(m.Seq, m.DeliveryCount, m.AcquiredCount, m.ReadyAt))
	}
	expect(t, "ReadEntries", windowed, scanned)
	expect(t, "ReadRefs", byRef, scanned)
	return scanned
}

// testRetryFields: an entry's ready-at time and acquired count (a
// delayed retry's due time and its count of every return) are kept as
// put, changed by an update (which sets every mutable field: what it
// leaves zero becomes zero), read back by every read, and survive a
// restart; entries without them read them as 0.
func testRetryFields(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	const q = store.QueueID(12)
	var b store.Batch
	for seq := uint64(1); seq <= 4; seq++ {
		m := newMsg(s, fmt.Sprint("r", seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m})
	}
	b.Puts[0].DeliveryCount, b.Puts[0].AcquiredCount, b.Puts[0].ReadyAt = 1, 2, 1767225601500
	b.Puts[2].AcquiredCount = 7
	b.Puts[3].ReadyAt, b.Puts[3].DeadLetter, b.Puts[3].DeadAt = -3, "rejected", 99
	b.Puts[3].Origin = &store.Origin{Queue: "src", Reason: "rejected", At: 98}
	Apply(t, s, &b)
	want := []string{retryState(1, 1, 2, 1767225601500), retryState(2, 0, 0, 0), retryState(3, 0, 7, 0), retryState(4, 0, 0, -3)}
	expect(t, "as put", retryStates(t, s, q), want)

	Apply(t, s, &store.Batch{Updates: []store.Update{
		{Ref: store.Ref{Queue: q, Seq: 1}, DeliveryCount: 2, AcquiredCount: 3, ReadyAt: 1767225603000},
		{Ref: store.Ref{Queue: q, Seq: 2}, AcquiredCount: 1, ReadyAt: 1767225600100},
		{Ref: store.Ref{Queue: q, Seq: 3}, DeliveryCount: 4}, // the acquired count goes back to 0
	}})
	want = []string{retryState(1, 2, 3, 1767225603000), retryState(2, 0, 1, 1767225600100), retryState(3, 4, 0, 0), retryState(4, 0, 0, -3)}
	expect(t, "updated", retryStates(t, s, q), want)
	s = reopen(t, s)
	expect(t, "updated, after reopen", retryStates(t, s, q), want)

	// An update of entries stored before the last restart, then another
	// restart: its fields come back, and the fields it does not name are
	// kept.
	Apply(t, s, &store.Batch{Updates: []store.Update{
		{Ref: store.Ref{Queue: q, Seq: 1}, DeliveryCount: 3, AcquiredCount: 4},
		{Ref: store.Ref{Queue: q, Seq: 4}, AcquiredCount: 1, ReadyAt: 5, DeadLetter: "rejected", DeadAt: 99},
	}})
	want = []string{retryState(1, 3, 4, 0), retryState(2, 0, 1, 1767225600100), retryState(3, 4, 0, 0), retryState(4, 0, 1, 5)}
	expect(t, "updated again", retryStates(t, s, q), want)
	s = reopen(t, s)
	defer s.Close()
	expect(t, "updated again, after reopen", retryStates(t, s, q), want)
	ms, err := s.ReadEntries(q, 0, 4, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("read entry 4: %v, %v", ms, err)
	}
	if m := ms[0]; m.DeadLetter != "rejected" || m.DeadAt != 99 || m.Origin == nil || m.Origin.Queue != "src" {
		t.Fatalf("entry 4 after its updates: dead letter %q at %d, origin %v; want rejected at 99 from src", m.DeadLetter, m.DeadAt, m.Origin)
	}
}

func testDropQueues(t *testing.T, open Opener, _ Reopener) {
	s := open(t)
	defer s.Close()
	var b store.Batch
	for i := uint64(1); i <= 3; i++ {
		m := newMsg(s, fmt.Sprint(i))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Seq: i}, Msg: m}, store.Entry{Ref: store.Ref{Queue: 2, Seq: i}, Msg: m})
	}
	Apply(t, s, &b)
	Apply(t, s, &store.Batch{DropQueues: []store.QueueID{1}, Meta: []store.MetaOp{{Key: "queue/1", Value: nil}}})
	expect(t, "queue 1", dump(t, s, 1, 0), nil)
	expect(t, "queue 2", dump(t, s, 2, 0), []string{"1:1", "2:2", "3:3"})
}

func testScanDeadlines(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	if _, ok := s.(DeadlineScanner); !ok {
		s.Close()
		t.Skipf("%T has no ScanDeadlines (storetest.DeadlineScanner)", s)
	}
	var b store.Batch
	add := func(q store.QueueID, seq uint64, deadline int64) {
		m := newMsg(s, fmt.Sprintf("%d/%d", q, seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m, Deadline: deadline})
	}
	add(1, 1, 300)
	add(1, 2, 100)
	add(2, 1, 100)
	add(2, 2, 0)
	add(1, 3, 200)
	add(3, 1, 900)
	Apply(t, s, &b)
	s = reopen(t, s)
	defer s.Close()
	var got []string
	err := s.(DeadlineScanner).ScanDeadlines(300, func(e *store.Entry) bool {
		got = append(got, fmt.Sprintf("%d@%d/%d", e.Deadline, e.Queue, e.Seq))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "deadlines", got, []string{"100@1/2", "100@2/1", "200@1/3", "300@1/1"})
}

// testDeadlineRefs: refs in deadline order within [from, until], levels
// kept, deleted entries gone once the store is reopened, fn able to stop.
func testDeadlineRefs(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	var b store.Batch
	add := func(q store.QueueID, prio uint8, seq uint64, deadline int64) {
		m := newMsg(s, fmt.Sprintf("%d/%d", q, seq))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: q, Prio: prio, Seq: seq}, Msg: m, Deadline: deadline})
	}
	add(1, 0, 1, 300)
	add(1, 2, 2, 100)
	add(2, 0, 1, 100)
	add(2, 0, 2, 0)
	add(1, 0, 3, 200)
	add(3, 1, 1, 900)
	add(3, 0, 2, 50)
	Apply(t, s, &b)
	refs := func(from, until int64, limit int) []string {
		t.Helper()
		var got []string
		err := s.DeadlineRefs(from, until, func(d int64, r store.Ref) bool {
			got = append(got, fmt.Sprintf("%d@%d/%d/%d", d, r.Queue, r.Prio, r.Seq))
			return len(got) < limit
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := []string{"50@3/0/2", "100@1/2/2", "100@2/0/1", "200@1/0/3", "300@1/0/1", "900@3/1/1"}
	expect(t, "all, before reopen", refs(0, 1000, 100), all)
	expect(t, "[100, 300]", refs(100, 300, 100), all[1:5])
	expect(t, "stopped after 2", refs(0, 1000, 2), all[:2])
	s = reopen(t, s)
	defer s.Close()
	expect(t, "all, after reopen", refs(0, 1000, 100), all)
	expect(t, "[100, 300] after reopen", refs(100, 300, 100), all[1:5])
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 1, Prio: 2, Seq: 2}, {Queue: 3, Prio: 1, Seq: 1}}})
	m := newMsg(s, "new")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 2, Seq: 3}, Msg: m, Deadline: 150}}})
	got := refs(0, 1000, 100)
	// The deleted ones may still be reported until the store checkpoints.
	got = slices.DeleteFunc(got, func(r string) bool { return r == "100@1/2/2" || r == "900@3/1/1" })
	expect(t, "after delete and put", got, []string{"50@3/0/2", "100@2/0/1", "150@2/0/3", "200@1/0/3", "300@1/0/1"})
	s = reopen(t, s)
	defer s.Close()
	expect(t, "after delete, put and reopen", refs(0, 1000, 100), []string{"50@3/0/2", "100@2/0/1", "150@2/0/3", "200@1/0/3", "300@1/0/1"})
}

func testMeta(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	Apply(t, s, &store.Batch{Meta: []store.MetaOp{
		{Key: "queue/b", Value: []byte("2")},
		{Key: "queue/a", Value: []byte("1")},
		{Key: "exchange/x", Value: []byte("x")},
		{Key: "queue/c", Value: []byte("3")},
	}})
	Apply(t, s, &store.Batch{Meta: []store.MetaOp{{Key: "queue/c"}, {Key: "queue/a", Value: []byte("1'")}}})
	s = reopen(t, s)
	defer s.Close()
	var got []string
	if err := s.ScanMeta("queue/", func(k string, v []byte) bool { got = append(got, k+"="+string(v)); return true }); err != nil {
		t.Fatal(err)
	}
	expect(t, "meta", got, []string{"queue/a=1'", "queue/b=2"})
}

func testReopen(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "r")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}})
	s = reopen(t, s)
	defer s.Close()
	var got *store.Entry
	_ = s.ScanQueue(1, 0, func(e *store.Entry) bool { got = e; return false })
	if got == nil || got.Msg.ID != m.ID || !got.Msg.Persistent || got.Msg.Header.Exchange != "x" ||
		!slices.Equal(got.Msg.Header.RoutingKeys, []string{"rk"}) || string(got.Msg.Header.Props) != string(m.Header.Props) {
		t.Fatalf("after reopen entry = %+v", got)
	}
	if id := s.AllocMsgID(); id <= m.ID {
		t.Fatalf("AllocMsgID after reopen = %d, reuses ids up to %d", id, m.ID)
	}
}

func testClosed(t *testing.T, open Opener, _ Reopener) {
	s := open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := applyErr(s, &store.Batch{Meta: []store.MetaOp{{Key: "k", Value: []byte("v")}}}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("apply after close: %v", err)
	}
	if err := s.ScanQueue(1, 0, func(*store.Entry) bool { return true }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("scan after close: %v", err)
	}
}

// testDoneOnce: done runs exactly once per Apply, also for a store that
// completes asynchronously; a second call is caught at the latest when
// Close has waited for the store's goroutines.
func testDoneOnce(t *testing.T, open Opener, _ Reopener) {
	s := open(t)
	const n = 50
	var mu sync.Mutex
	calls := make(map[int]int)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		s.Apply(&store.Batch{Meta: []store.MetaOp{{Key: fmt.Sprint("k", i), Value: []byte("v")}}}, func(err error) {
			if err != nil {
				t.Errorf("apply %d: %v", i, err)
			}
			mu.Lock()
			calls[i]++
			first := calls[i] == 1
			mu.Unlock()
			if first {
				wg.Done()
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if calls[i] != 1 {
			t.Errorf("done of apply %d called %d times", i, calls[i])
		}
	}
}

// testLastSeq: the highest seq ever put survives deletes and restarts, so
// a queue's seqs never restart.
func testLastSeq(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	m := newMsg(s, "s")
	Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 1, Seq: 7}, Msg: m}, {Ref: store.Ref{Queue: 1, Prio: 3, Seq: 9}, Msg: m},
	}})
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 1, Seq: 7}, {Queue: 1, Prio: 3, Seq: 9}}})
	want := map[store.QueueID]uint64{1: 9, 2: 0}
	check := func(when string) {
		for q, w := range want {
			got, err := s.LastSeq(q)
			if err != nil || got != w {
				t.Fatalf("%s: LastSeq(%d) = %d, %v; want %d", when, q, got, err, w)
			}
		}
	}
	check("after deletes")
	s = reopen(t, s)
	defer s.Close()
	check("after reopen")
}

// testPriorityLevels: entries of one queue on several levels scan in seq
// order, each keeping its level.
func testPriorityLevels(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	var b store.Batch
	for i, prio := range []uint8{0, 9, 2, 9, 0, 255} {
		m := newMsg(s, fmt.Sprint("p", prio))
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 4, Prio: prio, Seq: uint64(i + 1)}, Msg: m})
	}
	Apply(t, s, &b)
	Apply(t, s, &store.Batch{Deletes: []store.Ref{{Queue: 4, Prio: 9, Seq: 2}}})
	s = reopen(t, s)
	defer s.Close()
	var got []string
	err := s.ScanQueue(4, 0, func(e *store.Entry) bool {
		got = append(got, fmt.Sprintf("%d@%d:%s", e.Seq, e.Prio, e.Msg.Body))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "levels", got, []string{"1@0:p0", "3@2:p2", "4@9:p9", "5@0:p0", "6@255:p255"})
}

// testManyBatches: batches applied without waiting for each other are all
// durable once their done ran, in Apply order.
func testManyBatches(t *testing.T, open Opener, reopen Reopener) {
	s := open(t)
	const n = 500
	errc := make(chan error, n)
	var want []string
	for i := 1; i <= n; i++ {
		m := newMsg(s, fmt.Sprint("b", i))
		b := &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 5, Seq: uint64(i)}, Msg: m}}}
		if i%3 == 0 { // ack the previous one in the same stream
			b.Deletes = []store.Ref{{Queue: 5, Seq: uint64(i - 1)}}
			want = want[:len(want)-1]
		}
		want = append(want, fmt.Sprintf("%d:b%d", i, i))
		s.Apply(b, func(err error) { errc <- err })
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	s = reopen(t, s)
	defer s.Close()
	expect(t, "queue 5", dump(t, s, 5, 0), want)
}
