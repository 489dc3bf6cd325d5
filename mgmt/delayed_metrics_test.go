package mgmt_test

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// /metrics: brokerd_exchange_messages_delayed per delayed exchange (or
// summed, past the per-queue limit), and the held, released and dropped
// totals.
func TestDelayedMetrics(t *testing.T) {
	for _, limit := range []int{1000, 0} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			a := startMetricsAPI(t, brokertest.Selected(t), limit)
			ch := a.Session(t)
			for _, x := range []string{"dx", "dy"} {
				ch.DeclareExchange(x, "x-delayed-message", amqp091.Table{"x-delayed-type": "fanout"})
			}
			ch.Declare("q", nil)
			ch.Bind("q", "", "dx", nil)
			for _, d := range []int64{600_000, 600_000, 20} {
				ch.Publish("dx", "", amqp091.Publishing{Body: []byte("m"), Headers: amqp091.Table{"x-delay": d}})
			}
			ch.Publish("dy", "", amqp091.Publishing{Body: []byte("m"), Headers: amqp091.Table{"x-delay": int64(20)}})
			// Waiting for the 20 ms ones is the point: their release.
			waitFor(t, func() bool { return a.Broker.Stats().DelayedDropped == 1 && ch.Ready("q") == 1 })
			s := a.scrape()
			want := map[string]float64{
				"brokerd_delayed_messages_total":          4,
				"brokerd_delayed_messages_released_total": 1,
				"brokerd_delayed_messages_dropped_total":  1,
			}
			if limit > 0 {
				want["brokerd_exchange_messages_delayed{vhost=/,exchange=dx}"] = 2
				want["brokerd_exchange_messages_delayed{vhost=/,exchange=dy}"] = 0
			} else {
				want["brokerd_exchange_messages_delayed"] = 2
			}
			s.want(t, want)
			if n := len(s["brokerd_exchange_messages_delayed"].Metric); n != 2 && limit > 0 || n != 1 && limit == 0 {
				t.Errorf("%d series of brokerd_exchange_messages_delayed", n)
			}
		})
	}
}
