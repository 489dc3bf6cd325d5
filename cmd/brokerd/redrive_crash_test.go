package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestRedriveKill9 kills brokerd with SIGKILL in the middle of a redrive
// task moving 100,000 dead letters back to their origin queue. After the
// restart the task resumes by itself and finishes; its count of moves is
// exactly the number of messages, every message is in exactly one of the
// two queues (all of them in the origin), and none is lost or doubled.
// BROKERD_REDRIVE_CRASH_N sets the number of messages (default 100000).
func TestRedriveKill9(t *testing.T) {
	n := 100_000
	if v := os.Getenv("BROKERD_REDRIVE_CRASH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("BROKERD_REDRIVE_CRASH_N=%q: want a number >= 10", v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	args := []string{"-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data")}

	d := startDaemon(t, "", args...)
	conn, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for name, qargs := range map[string]amqp091.Table{
		"work": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
		"dlq":  nil,
	} {
		if _, err := ch.QueueDeclare(name, true, false, false, false, qargs); err != nil {
			t.Fatal(err)
		}
	}
	// Each message expires on arrival in work (expiration "0") and is
	// dead-lettered into dlq without its expiration, as RabbitMQ does: so
	// it stays in work once redriven.
	publishConfirmed(t, ch, n, func(i int) amqp091.Publishing {
		return amqp091.Publishing{DeliveryMode: amqp091.Persistent, Expiration: "0", Body: []byte(strconv.Itoa(i))}
	})
	waitDepth(t, ch, "dlq", n)
	conn.Close()

	api := mgmtClient{t: t, base: d.mgmtURL()}
	var task map[string]any
	api.call("POST", "/api/queues/%2F/dlq/redrive", map[string]any{"to": "origin"}, 201, &task)
	id := fmt.Sprint(task["id"])
	killAt := float64(n/10 + rng.IntN(n*6/10))
	for {
		api.call("GET", "/api/redrives/"+id, nil, 200, &task)
		if task["state"] != "running" {
			t.Fatalf("task ended before the kill: %v", task)
		}
		if task["moved"].(float64) >= killAt {
			break
		}
		select {
		case <-d.done:
			t.Fatalf("brokerd exited:\n%s", d.log())
		case <-time.After(20 * time.Millisecond): // polls the task's progress
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.wait()
	t.Logf("killed after %v of %d moves", task["moved"], n)

	restart := time.Now()
	d = startDaemon(t, "", args...)
	api = mgmtClient{t: t, base: d.mgmtURL()}
	t.Logf("the restart (log replay) took %v", time.Since(restart))
	api.call("GET", "/api/redrives/"+id, nil, 200, &task)
	if task["state"] != "running" || task["moved"].(float64) < killAt-float64(n/10) {
		t.Fatalf("task after the restart: %v (killed at about %v moves)", task, killAt)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for task["state"] == "running" && time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("brokerd exited:\n%s", d.log())
		case <-time.After(50 * time.Millisecond): // polls the task's progress
		}
		api.call("GET", "/api/redrives/"+id, nil, 200, &task)
	}
	if task["state"] != "finished" || task["moved"] != float64(n) || task["failed"] != 0.0 || task["remaining"] != 0.0 {
		t.Fatalf("resumed task: %v, want finished with %d moved", task, n)
	}

	conn, err = amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	waitDepth(t, ch, "dlq", 0)
	seen := make([]bool, n)
	drained := drainCount(t, ch, "work", func(body []byte, h amqp091.Table) {
		i, err := strconv.Atoi(string(body))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("unexpected message %q", body)
		}
		if seen[i] {
			t.Fatalf("message %d delivered twice", i)
		}
		seen[i] = true
		if h["x-redriven-count"] != int64(1) {
			t.Fatalf("message %d: x-redriven-count %v, want 1", i, h["x-redriven-count"])
		}
	})
	if drained != n {
		t.Fatalf("%d messages in work, want %d", drained, n)
	}
}

// publishConfirmed publishes n messages to queue "work" through the
// default exchange and waits for every confirm.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, n int, msg func(int) amqp091.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1024))
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			if err := ch.PublishWithContext(context.Background(), "", "work", false, false, msg(i)); err != nil {
				errs <- err
				return
			}
		}
	}()
	for got := 0; got < n; got++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d confirms", got, n)
		}
	}
}

// waitDepth waits until queue q holds n messages.
func waitDepth(t *testing.T, ch *amqp091.Channel, q string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d messages, want %d", q, st.Messages, n)
		}
		<-time.After(20 * time.Millisecond) // polls the queue's depth
	}
}

// drainCount consumes queue q (auto-ack) until it is empty and returns
// how many messages it got.
func drainCount(t *testing.T, ch *amqp091.Channel, q string, each func([]byte, amqp091.Table)) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < st.Messages {
		select {
		case m, ok := <-ds:
			if !ok {
				t.Fatalf("consumer closed after %d of %d", got, st.Messages)
			}
			each(m.Body, m.Headers)
			got++
			if got%500 == 0 || got == st.Messages {
				if err := m.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages in 30s", got, st.Messages)
		}
	}
	return got
}

// mgmtClient calls brokerd's management API as guest.
type mgmtClient struct {
	t    *testing.T
	base string
}

func (c mgmtClient) call(method, path string, body any, want int, out any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}
