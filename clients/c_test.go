package clients

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The C client library, librabbitmq, through a program built against it:
// the whole round trip, in librabbitmq's field kinds.
func TestCLibrabbitmq(t *testing.T) {
	if _, err := os.Stat("/usr/include/amqp.h"); err != nil {
		t.Skipf("no librabbitmq headers: install Debian package librabbitmq-dev (%v)", err)
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skipf("no C compiler: install Debian package gcc (%v)", err)
	}
	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, testdata(t, "client.c"), "-lrabbitmq").CombinedOutput(); err != nil {
		t.Fatalf("build client.c: %v\n%s", err, out)
	}
	b := startBroker(t)
	start := time.Now()
	out := runClient(t, time.Minute, nil, bin, b.host, b.port, "clib")
	checkDeadLetter(t, parseResult(t, out), "clib", start)
}

// The C client as its command-line tools (Debian amqp-tools, on
// librabbitmq). They publish and consume message bodies but cannot declare
// queue arguments, select confirm mode, reject, or show headers: the Go
// side (amqp091-go) declares the topology, rejects, and reads the x-death
// header, and the tools do the rest.
func TestCAmqpTools(t *testing.T) {
	for _, tool := range []string{"amqp-publish", "amqp-consume", "amqp-get"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH: install Debian package amqp-tools (%v)", tool, err)
		}
	}
	const p = "c"
	b := startBroker(t)
	server := []string{"--server", b.host, "--port", b.port}
	conn, err := amqp091.Dial("amqp://guest:guest@" + net.JoinHostPort(b.host, b.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	declareTopology(t, ch, p)
	start := time.Now()

	// amqp-publish: a persistent message with a header of its own.
	runClient(t, time.Minute, nil, "amqp-publish", append(server, "--exchange", p+".in", "--routing-key", p+".key",
		"--persistent", "--header", "x-sent-by: amqp-publish", "--body", body(p))...)

	// amqp-consume hands the body to a command and acks only if it
	// succeeds; this one fails, and the message goes back to the queue
	// when the tool closes its connection after one message.
	got := filepath.Join(t.TempDir(), "body")
	runClient(t, time.Minute, nil, "amqp-consume", append(server, "--queue", p+".work", "--count", "1", "--",
		"sh", "-c", `cat > "$0"; exit 1`, got)...)
	if b, err := os.ReadFile(got); err != nil || string(b) != body(p) {
		t.Fatalf("amqp-consume handed over %q (%v), want %q", b, err, body(p))
	}

	// The Go side rejects what the tools cannot.
	d, ok, err := ch.Get(p+".work", false)
	if err != nil || !ok {
		t.Fatalf("get %s.work after amqp-consume left it unacked: ok=%v err=%v", p, ok, err)
	}
	if !d.Redelivered || d.DeliveryMode != amqp091.Persistent || d.Headers["x-sent-by"] != "amqp-publish" {
		t.Errorf("message from amqp-publish, after amqp-consume: redelivered %v delivery-mode %d x-sent-by %v, want true, 2, amqp-publish",
			d.Redelivered, d.DeliveryMode, d.Headers["x-sent-by"])
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}

	// The dead letter, read by the Go side for its headers and put back...
	dl := getWithin(t, ch, p+".dlq", 10*time.Second)
	r := resultOf(t, dl)
	t.Logf("dead letter as amqp091-go reads it: %+v", r)
	checkDeath(t, r, p, start)
	if dl.Headers["x-sent-by"] != "amqp-publish" {
		t.Errorf("dead letter lost the publisher's header: x-sent-by = %v", dl.Headers["x-sent-by"])
	}
	if err := dl.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	// ...then taken by amqp-get, which prints its body.
	if out := runClient(t, time.Minute, nil, "amqp-get", append(server, "--queue", p+".dlq")...); string(out) != body(p) {
		t.Errorf("amqp-get printed %q, want %q", out, body(p))
	}
	if q, err := ch.QueueDeclarePassive(p+".dlq", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("%s.dlq after amqp-get: %d messages (%v), want 0", p, q.Messages, err)
	}
}

// declareTopology declares the exchanges, queues and bindings of doc.go
// for prefix p.
func declareTopology(t *testing.T, ch *amqp091.Channel, p string) {
	t.Helper()
	for _, x := range []string{p + ".in", p + ".dlx"} {
		if err := ch.ExchangeDeclare(x, "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare(p+".work", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": p + ".dlx", "x-dead-letter-routing-key": p + ".dead",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(p+".dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(p+".work", p+".key", p+".in", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(p+".dlq", p+".dead", p+".dlx", false, nil); err != nil {
		t.Fatal(err)
	}
}

// getWithin gets a message from q, waiting up to timeout for one to
// arrive: dead-lettering completes after the reject's round trip.
func getWithin(t *testing.T, ch *amqp091.Channel, q string, timeout time.Duration) amqp091.Delivery {
	t.Helper()
	msgs, err := ch.Consume(q, "get-within", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Cancel("get-within", false)
	select {
	case d := <-msgs:
		return d
	case <-time.After(timeout):
		t.Fatalf("no message in %s within %v", q, timeout)
	}
	return amqp091.Delivery{}
}

// resultOf reads a dead letter as amqp091-go types it.
func resultOf(t *testing.T, d amqp091.Delivery) result {
	t.Helper()
	var r result
	r.Client = "amqp-tools (headers read by amqp091-go)"
	r.DeadLetter.Exchange, r.DeadLetter.RoutingKey = d.Exchange, d.RoutingKey
	r.DeadLetter.Body, r.DeadLetter.DeliveryMode, r.DeadLetter.MessageID = string(d.Body), int(d.DeliveryMode), d.MessageId
	deaths, ok := d.Headers["x-death"].([]any)
	if !ok {
		t.Fatalf("x-death is %T, want []any", d.Headers["x-death"])
	}
	for i, e := range deaths {
		m, ok := e.(amqp091.Table)
		if !ok {
			t.Fatalf("x-death[%d] is %T, want amqp091.Table", i, e)
		}
		var x death
		x.Queue, _ = m["queue"].(string)
		x.Reason, _ = m["reason"].(string)
		x.Count, _ = m["count"].(int64)
		x.Exchange, _ = m["exchange"].(string)
		keys, _ := m["routing-keys"].([]any)
		for _, k := range keys {
			x.RoutingKeys = append(x.RoutingKeys, fmt.Sprint(k))
		}
		if tm, ok := m["time"].(time.Time); ok {
			x.Time = tm.Unix()
		}
		r.XDeath = append(r.XDeath, x)
	}
	r.FirstDeath.Queue, _ = d.Headers["x-first-death-queue"].(string)
	r.FirstDeath.Reason, _ = d.Headers["x-first-death-reason"].(string)
	r.FirstDeath.Exchange, _ = d.Headers["x-first-death-exchange"].(string)
	return r
}
