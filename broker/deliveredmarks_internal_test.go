package broker

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
)

// Close stores the exact delivered marks without holding a vhost's lock
// while it takes a queue's: a queue deleted just as Close comes to it (an
// x-expires lease running out during the stop) takes its own lock and then
// the vhost's, which must not wait for Close. Neither hangs, and the
// deleted queue does not come back at the next start (its marks are not
// written after its deletion), while another queue's marks are.
func TestCloseStoresMarksBesideQueueDeletion(t *testing.T) {
	st := memstore.New()
	opts := Options{Store: st, Logger: slog.New(slog.DiscardHandler)}
	b, d := openDirect(t, opts)
	persistent := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 2}
	for _, name := range []string{"gone", "kept"} {
		if _, aerr := d.Do(&amqp.QueueDeclare{Queue: name, Durable: true}); aerr != nil {
			t.Fatal(aerr)
		}
		for range 2 {
			if _, aerr := d.Publish("", name, persistent, []byte("m")); aerr != nil {
				t.Fatal(aerr)
			}
		}
		// One delivered: its level's mark is asked a chunk ahead, which
		// a clean stop brings back to the exact mark.
		if _, aerr := d.Do(&amqp.BasicGet{Queue: name, NoAck: true}); aerr != nil {
			t.Fatal(aerr)
		}
	}
	d.Close()
	var deleteErr error
	exactMarksHook = func(q *queue.Queue) {
		if q.Name == "gone" {
			_, w := b.deleteQueue(q)
			deleteErr = w.WaitErr()
		}
	}
	defer func() { exactMarksHook = nil }()
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a failure guard, not a wait for an event
		t.Fatal("Close hangs: it holds a vhost's lock while a deleted queue's lock waits for it")
	}
	if deleteErr != nil {
		t.Fatalf("delete during Close: %v", deleteErr)
	}

	b, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Queue("/", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("queue deleted during Close: %v after a restart, want ErrNotFound", err)
	}
	q := b.queueForTest("/", "kept")
	if q == nil {
		t.Fatal("queue kept is gone after a restart")
	}
	if m := q.MarksForTest(); m[0] != 1 {
		t.Fatalf("kept's stored mark %d after a clean stop, want 1 (the one delivery)", m[0])
	}
}

// metaOf returns the value stored under key in st, nil if there is none.
func metaOf(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	var v []byte
	if err := st.ScanMeta(key, func(k string, val []byte) bool {
		if k == key {
			v = val
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// A queue's delivered marks are its state record (defs.QueueState, keyed
// by its id), not part of its definition: a delivery writes the state,
// the definition stays as declared, a restart reads the marks back from
// the state, and the queue's deletion deletes both.
func TestQueueStateRecordApartFromDefinition(t *testing.T) {
	st := memstore.New()
	opts := Options{Store: st, Logger: slog.New(slog.DiscardHandler)}
	b, d := openDirect(t, opts)
	if _, aerr := d.Do(&amqp.QueueDeclare{Queue: "q", Durable: true}); aerr != nil {
		t.Fatal(aerr)
	}
	persistent := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 2}
	for range 2 {
		if _, aerr := d.Publish("", "q", persistent, []byte("m")); aerr != nil {
			t.Fatal(aerr)
		}
	}
	if _, aerr := d.Do(&amqp.BasicGet{Queue: "q", NoAck: true}); aerr != nil {
		t.Fatal(aerr)
	}
	id := uint64(b.queueForTest("/", "q").ID)
	d.Close()
	b.Close() // a clean stop stores the exact mark: 1

	def, err := defs.DecodeQueue(defs.QueueKey("/", "q"), metaOf(t, st, defs.QueueKey("/", "q")))
	if err != nil {
		t.Fatal(err)
	}
	if def.Marks != nil || def.Backlog {
		t.Fatalf("definition record %+v carries state", def)
	}
	state, err := defs.DecodeQueueState(defs.QueueStateKey(id), metaOf(t, st, defs.QueueStateKey(id)))
	if err != nil {
		t.Fatalf("state record: %v", err)
	}
	if len(state.Marks) == 0 || state.Marks[0] != 1 {
		t.Fatalf("state record marks %v, want [1]", state.Marks)
	}

	b, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if m := b.queueForTest("/", "q").MarksForTest(); m[0] != 1 {
		t.Fatalf("mark %d after a restart, want 1", m[0])
	}
	d, err = b.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, aerr := d.Do(&amqp.QueueDelete{Queue: "q"}); aerr != nil {
		t.Fatal(aerr)
	}
	if v := metaOf(t, st, defs.QueueStateKey(id)); v != nil {
		t.Fatalf("state record %x left after the queue's deletion", v)
	}
}

// A queue stored by a broker from before state records keeps its marks
// (and backlog flag) in its definition: they are recovered from there
// until a state record exists, which then wins; a state record of no
// queue is dropped at recovery.
func TestQueueStateFromOlderLayout(t *testing.T) {
	st := memstore.New()
	opts := Options{Store: st, Logger: slog.New(slog.DiscardHandler)}
	b, err := Open(opts) // bootstraps the vhost and user
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	apply := func(ops ...store.MetaOp) {
		t.Helper()
		done := make(chan error, 1)
		st.Apply(&store.Batch{Meta: ops}, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	apply(defs.EncodeQueue(defs.Queue{VHost: "/", Name: "old", ID: 41, Marks: []uint64{7, 3}}),
		defs.EncodeQueueState(defs.QueueState{ID: 99, Marks: []uint64{5}}))
	marks := func() []uint64 {
		t.Helper()
		b, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		q := b.queueForTest("/", "old")
		if q == nil {
			t.Fatal("queue old not recovered")
		}
		return q.MarksForTest()
	}
	if m := marks(); len(m) == 0 || m[0] != 7 {
		t.Fatalf("marks %v from the older layout's definition, want [7 …]", m)
	}
	if v := metaOf(t, st, defs.QueueStateKey(99)); v != nil {
		t.Fatalf("state record of no queue kept: %x", v)
	}
	apply(defs.EncodeQueueState(defs.QueueState{ID: 41, Marks: []uint64{9}}))
	if m := marks(); len(m) == 0 || m[0] != 9 {
		t.Fatalf("marks %v with a state record, want [9 …]: the state record wins over the definition", m)
	}
}

// openDirect opens a broker over opts and a Direct of guest in "/".
func openDirect(t *testing.T, opts Options) (*Broker, *Direct) {
	t.Helper()
	b, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
	return b, d
}
