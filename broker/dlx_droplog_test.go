package broker_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// dropWarnLog records the warnings logged, attributes flattened ("last.queue"),
// and signals each on lines.
type dropWarnLog struct {
	attrs []slog.Attr
	group string
	rec   *dropWarnRecords
}

type dropWarnRecords struct {
	mu    sync.Mutex
	recs  []map[string]string
	lines chan map[string]string
}

func (h *dropWarnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *dropWarnLog) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		if a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				add(prefix+a.Key+".", g)
			}
			return
		}
		m[prefix+a.Key] = a.Value.String()
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool { add("", a); return true })
	h.rec.mu.Lock()
	h.rec.recs = append(h.rec.recs, m)
	h.rec.mu.Unlock()
	h.rec.lines <- m
	return nil
}
func (h *dropWarnLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &dropWarnLog{attrs: append(append([]slog.Attr{}, h.attrs...), as...), rec: h.rec}
}
func (h *dropWarnLog) WithGroup(string) slog.Handler { return h }

// Dead letters dropped because the dead letter exchange is missing are
// warned about at once, then counted: one line per interval with the
// number and the last one's attributes, not one per message.
func TestDeadLetterDropWarningIsRateLimited(t *testing.T) {
	rec := &dropWarnRecords{lines: make(chan map[string]string, 100)}
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Logger: slog.New(&dropWarnLog{rec: rec})}})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "nowhere"}); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for range n {
		if err := ch.Publish("", "src", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		d, ok, err := ch.Get("src", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if err := d.Nack(false, false); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]string {
		t.Helper()
		for {
			select {
			case m := <-rec.lines:
				if m["msg"] == "dead letters dropped" {
					return m
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no \"dead letters dropped\" warning")
			}
		}
	}
	first := next()
	for k, v := range map[string]string{"cause": "dlx_missing", "vhost": "/", "queue": "src", "reason": "rejected", "dead_letter_exchange": "nowhere"} {
		if first[k] != v {
			t.Errorf("first warning: %s = %q, want %q (%v)", k, first[k], v, first)
		}
	}
	if _, ok := first["count"]; ok {
		t.Errorf("first warning has a count: %v", first)
	}
	// The other n-1 in one line, at the end of the interval.
	second := next()
	if second["count"] != "4" || second["cause"] != "dlx_missing" || second["last.queue"] != "src" {
		t.Errorf("second warning: %v; want count 4, cause dlx_missing, last.queue src", second)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	drops := 0
	for _, m := range rec.recs {
		if m["msg"] == "dead letters dropped" {
			drops++
		}
	}
	if drops != 2 {
		t.Errorf("%d warning lines for %d drops, want 2", drops, n)
	}
}
