package shovel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/shovel"
)

// BenchmarkShovel moves 100k persistent 1 KiB messages from one durable
// queue to another with the default definition (on-confirm, prefetch
// 1000): local→local on one brokerd, and remote→local from a second
// brokerd over loopback TCP. The store is BROKERD_TEST_STORE's.
//
//	go test -run '^$' -bench BenchmarkShovel -benchtime 1x ./shovel/
func BenchmarkShovel(b *testing.B) {
	const n, size = 100_000, 1024
	for _, remote := range []bool{false, true} {
		name := "local-local"
		if remote {
			name = "remote-local"
		}
		b.Run(name, func(b *testing.B) {
			dst := brokertest.Start(b, brokertest.Config{})
			src := dst
			if remote {
				src = brokertest.Start(b, brokertest.Config{})
			}
			m := manager(b, shovel.Options{Local: local(b, dst), Logger: discard})
			srcURI := "amqp://"
			if remote {
				srcURI = src.URL
			}
			ss, sd := src.Session(b), dst.Session(b)
			body := make([]byte, size)
			b.SetBytes(n * size)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				q, dq := fmt.Sprint("src", i), fmt.Sprint("dst", i)
				ss.Declare(q, nil, brokertest.Durable)
				sd.Declare(dq, nil, brokertest.Durable)
				fill(b, src, q, n, body)
				b.StartTimer()
				start := time.Now()
				m.Start("/", q, def(b, map[string]any{"src-uri": srcURI, "src-queue": q, "dest-uri": "amqp://", "dest-queue": dq}))
				for {
					qi, err := dst.Broker.Queue("/", dq)
					if err != nil {
						b.Fatal(err)
					}
					si, err := src.Broker.Queue("/", q)
					if err != nil {
						b.Fatal(err)
					}
					if qi.Ready >= n && si.Messages() == 0 {
						break
					}
					// The broker offers no event for a queue's depth, and a consumer
					// on the destination would load the run it measures: poll, the
					// measured time off by at most 5 ms.
					time.Sleep(5 * time.Millisecond)
				}
				el := time.Since(start)
				b.StopTimer()
				m.Stop("/", q)
				b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
				b.StartTimer()
			}
		})
	}
}

// fill publishes n persistent messages of body to queue, confirmed, with
// at most 1000 awaiting their confirm.
func fill(b *testing.B, inst *brokertest.Instance, queue string, n int, body []byte) {
	conn := inst.Dial(b)
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var window []*amqp091.DeferredConfirmation
	wait := func() {
		for _, dc := range window {
			if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
				b.Fatalf("publish not confirmed: %v", err)
			}
		}
		window = window[:0]
	}
	for range n {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{DeliveryMode: 2, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		if window = append(window, dc); len(window) == 1000 {
			wait()
		}
	}
	wait()
}
