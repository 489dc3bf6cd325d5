package broker

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
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
	b, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
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

	b, err = Open(opts)
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
