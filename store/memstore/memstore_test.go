package memstore_test

import (
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/store/storetest"
)

// The conformance suite's ScanDeadlines case runs on the memory store.
var _ storetest.DeadlineScanner = (*memstore.Store)(nil)

func TestConformance(t *testing.T) {
	storetest.Run(t,
		func(*testing.T) store.Store { return memstore.New() },
		func(_ *testing.T, s store.Store) store.Store { return s.(*memstore.Store).Reopen() })
}

// LastSeq outlives the entries and a Reopen.
func TestLastSeq(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() }) // the store current at the end
	m := &store.Message{ID: s.AllocMsgID(), Persistent: true}
	e := func(seq uint64) store.Entry { return store.Entry{Ref: store.Ref{Queue: 1, Prio: 2, Seq: seq}, Msg: m} }
	apply := func(b *store.Batch) {
		t.Helper()
		var err error
		s.Apply(b, func(e error) { err = e })
		if err != nil {
			t.Fatal(err)
		}
	}
	want := func(q store.QueueID, n uint64) {
		t.Helper()
		if got, err := s.LastSeq(q); err != nil || got != n {
			t.Fatalf("LastSeq(%d) = %d, %v; want %d", q, got, err, n)
		}
	}
	want(1, 0)
	apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{e(3), e(7)}})
	want(1, 7)
	want(2, 0)
	apply(&store.Batch{Deletes: []store.Ref{e(3).Ref, e(7).Ref}})
	want(1, 7)
	s = s.Reopen()
	want(1, 7)
}
