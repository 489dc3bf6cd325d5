// Tests that paging bounds a queue's memory by the bytes of properties as well as bodies.

package broker_test

// Paging bounds what a queue holds in memory by bytes of messages, and a
// message's bytes are its properties as well as its body (issue 22, item
// 14): 20,000 messages with a 120 KB header and no body kept 1.1 GiB of
// live heap in one queue, all of it resident.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// propsMessage is message i: no body, its bytes in a header.
func propsMessage(i, size int, dm uint8) amqp091.Publishing {
	pad := fmt.Sprintf("m%05d", i) + strings.Repeat("p", size-6)
	return amqp091.Publishing{DeliveryMode: dm, Headers: amqp091.Table{"pad": pad}}
}

func wantPropsMessage(t *testing.T, d amqp091.Delivery, i, size int) {
	t.Helper()
	pad, _ := d.Headers["pad"].(string)
	if len(d.Body) != 0 || len(pad) != size || !strings.HasPrefix(pad, fmt.Sprintf("m%05d", i)) {
		t.Fatalf("delivery %d: body %d bytes, header pad %d bytes starting %q", i, len(d.Body), len(pad), pad[:min(len(pad), 6)])
	}
}

// Messages whose bytes are all in their properties page as messages with
// that many body bytes do: a window of 64 KiB holds about four of 16 KiB
// headers, not its count of 1000, live, after a restart and for transient
// messages (defect: windows counted body bytes only, so bodiless messages
// never paged by bytes). Every message is delivered in order with its
// header intact.
func TestPagingBoundsPropertyBytes(t *testing.T) {
	const (
		size        = 16 << 10
		n           = 60
		windowBytes = 64 << 10
		// head and tail windows, each one message over at most, and a
		// batch of two arriving while the tail pages out
		boundN = 2*(windowBytes/size+1) + 2
	)
	for _, mode := range []string{"live", "restart", "transient"} {
		t.Run(mode, func(t *testing.T) {
			dm := amqp091.Persistent
			if mode == "transient" {
				dm = amqp091.Transient
			}
			b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{PageWindow: 1000, PageWindowBytes: windowBytes}})
			ch := b.Session(t)
			ch.Declare("props", nil, brokertest.Durable)
			wantBound := func(when string) {
				t.Helper()
				res, ready := b.Broker.ResidentForTest("/", "props")
				if res > boundN {
					t.Fatalf("%s: %d of %d messages in memory, want at most %d", when, res, ready, boundN)
				}
				if got := b.Broker.ResidentBytesForTest("/", "props"); got > boundN*size+boundN*256 {
					t.Fatalf("%s: %d bytes in memory (%d messages), want at most about %d", when, got, res, boundN*size)
				}
			}
			for i := range n {
				if !ch.PublishAck("", "props", propsMessage(i, size, dm)) {
					t.Fatalf("publish %d nacked", i)
				}
			}
			ch.WantReady("props", n)
			wantBound("after publishing")
			// The byte counts are of bodies (RabbitMQ's classic queues'
			// message_bytes); the memory figure shows the properties.
			qi, err := b.Broker.Queue("/", "props")
			if err != nil {
				t.Fatal(err)
			}
			if res := b.Broker.ResidentBytesForTest("/", "props"); qi.ReadyBytes != 0 || qi.Memory != res || qi.Memory < size {
				t.Fatalf("queue info: ready bytes %d, memory %d; want 0 and the %d resident bytes", qi.ReadyBytes, qi.Memory, res)
			}
			if mode == "restart" {
				b.Restart()
				ch = b.Session(t)
				ch.WantReady("props", n)
				wantBound("after the restart")
			}
			if err := ch.Qos(2, 0, false); err != nil {
				t.Fatal(err)
			}
			msgs := dvConsume(t, ch, "props", "c", false, nil)
			for i := range n {
				d := dvRecv(t, msgs)
				wantPropsMessage(t, d, i, size)
				dvAck(t, d, false)
				wantBound(fmt.Sprintf("after %d deliveries", i+1))
			}
			ch.WantReady("props", 0)
		})
	}
}

// The acceptance figure: 2,000 messages with 120 KB headers (and no body)
// in one durable queue on the disk store keep the live heap within the
// queue's page windows (two of page_window_bytes, 4 MiB by default) and
// what the store holds before a checkpoint, not 240 MB. The heap is read
// after a collection, so this runs without the race detector (.ci/run
// runs it on its own).
func TestPagedPropertiesHeapInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("heap figures: not with -short")
	}
	if broker.RaceEnabledForTest {
		t.Skip("heap figures: not under the race detector")
	}
	const (
		n           = 2000
		size        = 120_000
		windowBytes = 4 << 20
	)
	b := brokertest.Start(t, brokertest.Config{
		Backend: brokertest.Disk(),
		Broker:  broker.Options{PageWindow: 2048, PageWindowBytes: windowBytes},
	})
	ch := b.Session(t)
	ch.Declare("props", nil, brokertest.Durable)
	before := heapInUse()
	ctx := context.Background()
	var confirms []*amqp091.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "props", false, false, propsMessage(i, size, amqp091.Persistent))
		if err != nil {
			t.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for i, dc := range confirms {
		if ok, err := dc.WaitContext(brokertest.Context(t)); err != nil || !ok {
			t.Fatalf("confirm %d: ack %v, err %v", i, ok, err)
		}
	}
	confirms = nil
	ch.WantReady("props", n)
	grew := int64(heapInUse()) - int64(before)
	res, _ := b.Broker.ResidentForTest("/", "props")
	resBytes := b.Broker.ResidentBytesForTest("/", "props")
	// Two windows, each one message over at most; besides, the WAL's
	// buffers (a group of records: 4 MiB at most in this run), the disk
	// store's overlays (brokertest checkpoints every 256 KiB) and the
	// client's buffers.
	const bound = 2*(windowBytes+size) + 8<<20
	t.Logf("%d messages of %d header bytes: live heap +%.1f MiB, %d resident holding %.1f MiB", n, size, float64(grew)/(1<<20), res, float64(resBytes)/(1<<20))
	if resBytes > 2*(windowBytes+size) {
		t.Fatalf("%d bytes of messages resident, want at most two windows of %d", resBytes, windowBytes)
	}
	if grew > bound {
		t.Fatalf("live heap grew by %.1f MiB for %d messages of %d header bytes (%d resident), want at most %.1f MiB",
			float64(grew)/(1<<20), n, size, res, float64(bound)/(1<<20))
	}
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, ch, "props", "c", false, nil)
	for i := range n {
		d := dvRecv(t, msgs)
		wantPropsMessage(t, d, i, size)
		dvAck(t, d, false)
	}
	ch.WantReady("props", 0)
}
