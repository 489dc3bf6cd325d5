// Tests of where a dead letter goes: exchange, routing key, CC/BCC and the target queues.

package broker_test

// Tests of where a dead letter goes (SPEC §2): the dead-letter exchange,
// of any type, and routing key, a missing exchange, the CC and BCC
// headers of the original publish, and the target queues: their limits
// hold for a batch of dead letters, and deleting one waits for a copy on
// its way to it.

import (
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

func dsMissingExchange(e *dsEnv) {
	// The exchange does not exist (the suite deletes it first).
	e.queue("src", amqp091.Table{"x-max-length": int64(1), "x-dead-letter-exchange": "dlx-exchange-2", "x-dead-letter-routing-key": "dlq"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.PublishBodies("src", "p1")
	e.waitFor("src", 1, 1, 0)
	d := e.Expect("src", "p1")[0]
	e.waitFor("src", 1, 0, 1)
	e.reject(d, false)
	if e.g.atLeastOnce {
		// Kept in the backlog instead of lost: one message, neither
		// ready nor unacked.
		e.waitFor("src", 1, 0, 0)
		e.waitBacklog("src", 1)
		e.wantCounters(map[string]uint64{"backlogged": 1})
	} else {
		e.waitFor("src", 0, 0, 0)
		e.wantCounters(map[string]uint64{"discarded.rejected": 1, "dropped.dlx_missing": 1})
	}
	e.WantEmpty("dlq")
	e.WantEmpty("src")

	e.DeclareExchange("dlx-exchange-2", "direct", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx-exchange-2", nil)
	if e.g.atLeastOnce {
		// The binding made a route: forwarded at once.
		e.waitFor("src", 0, 0, 0)
		e.Expect("dlq", "p1")
	}
	e.PublishBodies("src", "p2")
	e.reject(e.Expect("src", "p2")[0], false)
	d = e.Expect("dlq", "p2")[0]
	dsWantRoute(e.t, d, "dlx-exchange-2", "dlq")
	e.WantEmpty("dlq")
	if e.g.atLeastOnce {
		e.wantCounters(map[string]uint64{"backlogged": 1, "dead_lettered.rejected": 2})
	} else {
		e.wantCounters(map[string]uint64{"discarded.rejected": 1, "dropped.dlx_missing": 1, "dead_lettered.rejected": 1})
	}
}

// dsRoutingKey: without a dead-letter routing key the message is routed
// with its own key; while nothing is bound with it, it is lost
// (at-most-once) or kept (at-least-once, forwarded once bound).
func dsRoutingKey(e *dsEnv) {
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.PublishBodies("src", "p1")
	e.waitFor("src", 1, 1, 0)
	e.nack(e.Expect("src", "p1")[0], false, false)
	if e.g.atLeastOnce {
		e.waitFor("src", 1, 0, 0)
	} else {
		e.waitFor("src", 0, 0, 0)
	}
	e.WantEmpty("src")
	e.WantEmpty("dlq")
	e.Bind("dlq", "src", "dlx", nil)
	if e.g.atLeastOnce {
		e.waitFor("dlq", 1, 1, 0)
		e.waitFor("src", 0, 0, 0)
	}
	e.PublishBodies("src", "p2")
	e.waitFor("src", 1, 1, 0)
	e.nack(e.Expect("src", "p2")[0], false, false)
	var ds []amqp091.Delivery
	if e.g.atLeastOnce {
		ds = e.Expect("dlq", "p1", "p2")
		e.wantCounters(map[string]uint64{"backlogged": 1, "dead_lettered.rejected": 2})
	} else {
		ds = e.Expect("dlq", "p2")
		e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1, "discarded.rejected": 1, "dropped.unroutable": 1})
	}
	for _, d := range ds {
		dsWantRoute(e.t, d, "dlx", "src")
	}
	e.WantEmpty("dlq")
}

// dsRoutingKeyHeaderCC: without a dead-letter routing key the CC keys route
// too.
func dsRoutingKeyHeaderCC(e *dsEnv) { dsRoutingKeyHeaderSender(e, "CC") }

func dsRoutingKeyHeaderBCC(e *dsEnv) { dsRoutingKeyHeaderSender(e, "BCC") }

func dsRoutingKeyHeaderSender(e *dsEnv, header string) {
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx", nil)
	e.PublishBodies("src", "p1")
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p2"), Headers: amqp091.Table{header: []interface{}{"dlq"}}})
	// p2 is also in dlq directly: its sender key names it.
	e.waitFor("src", 2, 2, 0)
	e.waitFor("dlq", 1, 1, 0)
	ds := e.Expect("src", "p1", "p2")
	e.Expect("dlq", "p2")
	e.nack(ds[1], false, false)
	// Dead-lettered through the DLX with the sender key.
	e.waitFor("dlq", 2, 1, 1)
	e.WantEmpty("src")
	d := e.Expect("dlq", "p2")[0]
	e.WantEmpty("dlq")
	dsWantRoute(e.t, d, "dlx", "src")
	keys := []string{"src", "dlq"}
	if header == "BCC" {
		keys = []string{"src"}
		dsWantAbsent(e.t, d.Headers, "BCC")
	} else {
		dsWantArray(e.t, d.Headers, "CC", "dlq")
	}
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: keys})
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1})
}

// TestDLXExchangeTypes: the DLX may be any exchange of any type, with
// exchange-to-exchange bindings and alternate exchanges followed (B7).
func TestDLXExchangeTypes(t *testing.T) {
	type tc struct {
		name string
		// prepare declares the DLX and its targets; it returns the
		// source's DLX arguments and the queues that must get one copy.
		prepare func(e *dsEnv) (amqp091.Table, []string)
		headers amqp091.Table // of the published message
		none    []string      // queues that must get nothing
	}
	cases := []tc{
		{name: "default", prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.Declare("dlq", nil, brokertest.Durable)
			return amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}, []string{"dlq"}
		}},
		{name: "fanout", prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.DeclareExchange("fan", "fanout", nil, brokertest.Durable)
			for _, q := range []string{"f1", "f2", "f3"} {
				e.Declare(q, nil, brokertest.Durable)
				e.Bind(q, "", "fan", nil)
			}
			return amqp091.Table{"x-dead-letter-exchange": "fan", "x-dead-letter-routing-key": "ignored"}, []string{"f1", "f2", "f3"}
		}},
		{name: "topic", none: []string{"t-us"}, prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.DeclareExchange("top", "topic", nil, brokertest.Durable)
			for q, k := range map[string]string{"t-star": "*.eu", "t-hash": "orders.#", "t-us": "*.us"} {
				e.Declare(q, nil, brokertest.Durable)
				e.Bind(q, k, "top", nil)
			}
			return amqp091.Table{"x-dead-letter-exchange": "top", "x-dead-letter-routing-key": "orders.eu"}, []string{"t-star", "t-hash"}
		}},
		{name: "headers", headers: amqp091.Table{"kind": "order"}, none: []string{"h-other"}, prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.DeclareExchange("hdr", "headers", nil, brokertest.Durable)
			e.Declare("h-order", nil, brokertest.Durable)
			e.Declare("h-other", nil, brokertest.Durable)
			e.Bind("h-order", "", "hdr", amqp091.Table{"x-match": "all", "kind": "order"})
			e.Bind("h-other", "", "hdr", amqp091.Table{"x-match": "any", "kind": "other"})
			return amqp091.Table{"x-dead-letter-exchange": "hdr"}, []string{"h-order"}
		}},
		{name: "exchange_to_exchange", prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
			e.DeclareExchange("fan", "fanout", nil, brokertest.Durable)
			if err := e.ExchangeBind("fan", "dlq", "dlx", false, nil); err != nil {
				e.t.Fatal(err)
			}
			e.Declare("via-fan", nil, brokertest.Durable)
			e.Bind("via-fan", "", "fan", nil)
			return amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"}, []string{"via-fan"}
		}},
		{name: "alternate_exchange", prepare: func(e *dsEnv) (amqp091.Table, []string) {
			e.DeclareExchange("ae", "fanout", nil, brokertest.Durable)
			e.Declare("ae-q", nil, brokertest.Durable)
			e.Bind("ae-q", "", "ae", nil)
			e.DeclareExchange("dlx", "direct", amqp091.Table{"alternate-exchange": "ae"}, brokertest.Durable)
			return amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "unbound"}, []string{"ae-q"}
		}},
	}
	for _, g := range dsGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					e := dsStart(t, g, brokertest.Config{})
					args, targets := c.prepare(e)
					e.queue("src", args)
					e.Publish("", "src", amqp091.Publishing{Body: []byte("p"), Headers: c.headers})
					e.reject(e.Expect("src", "p")[0], false)
					for _, q := range targets {
						d := e.Expect(q, "p")[0]
						e.WantEmpty(q)
						e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
					}
					for _, q := range c.none {
						e.WantEmpty(q)
					}
					e.waitFor("src", 0, 0, 0)
					// One message dead-lettered, whatever the number of copies.
					e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1})
					e.wantQueueDeadLettered("src", map[string]uint64{"rejected": 1})
				})
			}
		})
	}
}

// Dead-lettering several entries in one operation (nack multiple,
// several expiries in one timer batch, drop-head evicting many, a backlog
// retry) checks the target's reject-publish limit against the target's
// readyN, which does not count the copies already planned in the same
// call (they enter the target only in txn.finish). A target with
// x-max-length 1 / reject-publish receives every copy.
//
// Review finding R1 of an adversarial review of the broker's
// concurrency and store ordering; it failed before the fix.
func TestDeadLetterBatchIntoFullRejectPublishTarget(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("dlq", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	ch.Declare("src", tlDLX("dlq", nil))
	ch.PublishBodies("src", "a", "b", "c")
	var last amqp091.Delivery
	for range 3 {
		last = ch.Get("src")
	}
	if err := ch.Nack(last.DeliveryTag, true, false); err != nil {
		t.Fatal(err)
	}
	ch.Sync()
	if got := tlReady(t, b, "dlq"); got != 1 {
		t.Fatalf("reject-publish target with x-max-length 1 holds %d messages after a nack-multiple of 3 (SPEC §4: limits are exact)", got)
	}
}

// A dead-letter target deleted while a dead letter is on its
// way: the delete must not slip between routing the copy to the target and
// writing it, or the copy would land in a dropped queue and the message be
// in neither place. The vhost lock held from routing to the store write
// fences it: the delete waits for the dead letter's batch, then takes the
// copy with the queue like any message it held, leaving nothing orphaned in
// the store and nothing in the source.
//
// Review finding R4 (revised) of an adversarial review of the broker's
// concurrency and store ordering; it failed before the fix.
func TestDeadLetterTargetDeleteWaitsForCopyWrite(t *testing.T) {
	var armed atomic.Bool
	var hook func(dlq store.QueueID)
	hs := &brokertest.SpyStore{}
	var dlqID atomic.Uint64
	hs.BeforeApply = func(bt *store.Batch) {
		if len(bt.Puts) == 0 || len(bt.Deletes) == 0 || bt.Puts[0].Queue == bt.Deletes[0].Queue {
			return
		}
		if armed.CompareAndSwap(true, false) {
			dlqID.Store(uint64(bt.Puts[0].Queue))
			hook(bt.Puts[0].Queue)
		}
	}
	b := brokertest.Start(t, brokertest.Config{WrapStore: hs.Wrap})
	ch := b.Session(t)
	_, other := b.Channel(t)
	deleted := make(chan struct{}) // closed when the delete has returned
	var deleteErr error
	hook = func(store.QueueID) {
		// Inside the dead letter's store write: start deleting the
		// target; it must not finish before this write does.
		go func() {
			_, deleteErr = other.QueueDelete("dlq", false, false, false)
			close(deleted)
		}()
		select {
		case <-deleted:
			t.Errorf("target deleted in the middle of the dead letter's store write (err %v)", deleteErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("src", tlDLX("dlq", amqp091.Table{"x-dead-letter-strategy": "at-least-once"}), brokertest.Durable)
	ch.Publish("", "src", amqp091.Publishing{Body: []byte("m"), DeliveryMode: amqp091.Persistent})
	d := ch.Get("src")
	armed.Store(true)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deleted:
		if deleteErr != nil {
			t.Fatalf("delete dlq: %v", deleteErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("target delete never completed")
	}
	ch.Sync()
	if armed.Load() {
		t.Fatal("hook did not run")
	}
	// The copy reached the target, then went with it: nothing of the
	// deleted queue is left in the store, and the source is empty.
	var orphans int
	if err := b.Store.ScanQueue(store.QueueID(dlqID.Load()), 0, func(*store.Entry) bool { orphans++; return true }); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Fatalf("%d entries of the deleted target left in the store", orphans)
	}
	if st := tlQueueStats(t, b, "src"); st.Ready+st.Unacked+st.DeadLetterBacklog != 0 {
		t.Fatalf("source still holds the message: %+v", st)
	}
}
