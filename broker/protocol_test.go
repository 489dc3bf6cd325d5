// Tests with clients other than amqp091-go (amqp-tools, pika), when installed.

package broker_test

// Tests with clients other than amqp091-go, run when they are installed:
// amqp-tools (librabbitmq) and pika (clients/ drives the others); and the
// ordering they rely on, consume-ok before the consumer's first delivery.
// Helpers (pr*) are in protocol_helpers_test.go.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestAmqpTools(t *testing.T) {
	for _, tool := range []string{"amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH (Debian package amqp-tools): %v", tool, err)
		}
	}
	b := brokertest.Start(t, brokertest.Config{})
	// librabbitmq reads the vhost from the URL path: none means "/".
	url := strings.TrimSuffix(b.URL, "/")
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, append([]string{"--url=" + url}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := run("amqp-declare-queue", "-q", "tools"); strings.TrimSpace(out) != "tools" {
		t.Fatalf("amqp-declare-queue printed %q, want the queue name", out)
	}
	run("amqp-publish", "-r", "tools", "-b", "from amqp-publish")
	run("amqp-publish", "-r", "tools", "-b", "second message")
	if out := run("amqp-get", "-q", "tools"); out != "from amqp-publish" {
		t.Fatalf("amqp-get printed %q", out)
	}
	if out := run("amqp-consume", "-q", "tools", "-c", "1", "cat"); out != "second message" {
		t.Fatalf("amqp-consume printed %q", out)
	}
	// Both messages were acked: the queue is empty.
	_, ch := b.Channel(t)
	q, err := ch.QueueDeclarePassive("tools", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Fatalf("%d messages left in the queue", q.Messages)
	}
}

// prPikaScript publishes with confirms, consumes, acks, and prints what it saw.
const prPikaScript = `
import sys, pika
params = pika.URLParameters(sys.argv[1])
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue="pika", durable=True)
for i in range(3):
    ch.basic_publish(exchange="", routing_key="pika", body=("msg-%d" % i).encode(),
                     properties=pika.BasicProperties(delivery_mode=2, headers={"n": i}),
                     mandatory=True)
print("confirmed 3")
got = []
for method, props, body in ch.consume("pika", inactivity_timeout=5):
    if method is None:
        break
    got.append("%s:%d" % (body.decode(), props.headers["n"]))
    ch.basic_ack(method.delivery_tag)
    if len(got) == 3:
        break
ch.cancel()
print("got " + ",".join(got))
ok = ch.queue_declare(queue="pika", passive=True)
print("left %d" % ok.method.message_count)
try:
    ch.basic_publish(exchange="", routing_key="nowhere", body=b"x", mandatory=True)
    print("unroutable confirmed")
except pika.exceptions.UnroutableError:
    print("unroutable returned")
conn.close()
`

func TestPika(t *testing.T) {
	// python3 on PATH may be a different interpreter than the one the
	// Debian package python3-pika installs into.
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import pika").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip(`no python3 can "import pika" (Debian package python3-pika)`)
	}
	b := brokertest.Start(t, brokertest.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", prPikaScript, strings.TrimSuffix(b.URL, "/")+"/%2F")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pika script: %v\n%s", err, out)
	}
	want := "confirmed 3\ngot msg-0:0,msg-1:1,msg-2:2\nleft 0\nunroutable returned\n"
	if string(out) != want {
		t.Fatalf("pika script printed:\n%s\nwant:\n%s", out, want)
	}
}

// TestConsumeOkPrecedesDeliveries: basic.consume-ok is the first thing a
// new consumer sees, even when another goroutine dispatches to the queue
// the moment the consumer is added (here a confirmed publish from a second
// connection, made from that very moment): a client that learns its
// consumer tag from consume-ok (the Java client, the bench's raw client)
// cannot handle a delivery that overtakes it.
func TestConsumeOkPrecedesDeliveries(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c := b.Dial(t)
	pch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	var hookErr error
	defer broker.SetConsumerAddedHookForTest(func() {
		// The confirm comes after the message was routed and handed to
		// the queue's consumer: the delivery is written by then.
		if err := pch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
			hookErr = err
			return
		}
		if c := <-confirms; !c.Ack {
			hookErr = fmt.Errorf("publish nacked")
		}
	})()
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.BasicConsume{Queue: "q", ConsumerTag: "c", NoAck: true})
	if ok := rawExpect[*amqp.BasicConsumeOk](r, 1); ok.ConsumerTag != "c" {
		t.Fatalf("consume-ok for %q, want c", ok.ConsumerTag)
	}
	if d := rawExpect[*amqp.BasicDeliver](r, 1); d.ConsumerTag != "c" {
		t.Fatalf("delivery to %q, want c", d.ConsumerTag)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
}
