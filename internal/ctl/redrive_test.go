package ctl

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// redrive is brokerd's own: against RabbitMQ the test is skipped. Three
// dead letters: one redriven to origin (--max 1, --reason), the rest
// through the default exchange to another queue; a missing queue and bad
// option combinations fail.
func TestRedrive(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		if e.srv.name == "external" {
			t.Skip("redrive is brokerd's; the external server is RabbitMQ")
		}
		ch := e.channel()
		for _, q := range []string{"rd-dlq", "rd-other"} {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ch.QueueDeclare("rd-work", true, false, false, false,
			amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rd-dlq"}); err != nil {
			t.Fatal(err)
		}
		e.publish(ch, "rd-work", "m1", "m2", "m3")
		for range 3 {
			d, ok, err := ch.Get("rd-work", false)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		}
		e.eventuallyOut([]string{"rd-dlq\t3"}, "list_queues", "-p", e.vhost)

		out := e.ok("redrive", "-p", e.vhost, "--to-origin", "--max", "1", "--reason", "rejected", "rd-dlq")
		if !hasLine(out, "state\tmoved\tfailed\tremaining") || !hasLine(out, "finished\t1\t0\t2") {
			t.Fatalf("redrive to origin printed:\n%s", out)
		}
		e.eventuallyOut([]string{"rd-work\t1"}, "list_queues", "-p", e.vhost)
		out = e.ok("-q", "redrive", "-p", e.vhost, "--exchange", "", "--routing-key", "rd-other", "rd-dlq")
		if strings.TrimSpace(out) != "state\tmoved\tfailed\tremaining\nfinished\t2\t0\t0" {
			t.Fatalf("redrive to exchange printed:\n%s", out)
		}
		for _, want := range []string{"m2", "m3"} {
			d, ok, err := ch.Get("rd-other", true)
			if err != nil || !ok || string(d.Body) != want || d.Headers["x-redriven-count"] != int64(1) {
				t.Fatalf("rd-other: got %q %v %v %v, want %s", d.Body, ok, err, d.Headers, want)
			}
		}
		e.fails(ExitUnavailable, []string{"Queue 'nope' in vhost '" + e.vhost + "' not found"}, "redrive", "-p", e.vhost, "nope")
		e.fails(ExitUsage, []string{"exclude"}, "redrive", "-p", e.vhost, "--to-origin", "--exchange", "x", "rd-dlq")
		e.fails(ExitUsage, []string{"--max"}, "redrive", "-p", e.vhost, "--max", "0", "rd-dlq")
		e.fails(ExitUsage, []string{"--rate"}, "redrive", "-p", e.vhost, "--rate", "0", "rd-dlq")

		// A paced task, detached: listed while it runs, then cancelled.
		e.publish(ch, "rd-work", "p1", "p2", "p3", "p4")
		for range 4 {
			d, ok, err := ch.Get("rd-work", false)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		}
		e.eventuallyOut([]string{"rd-dlq\t4"}, "list_queues", "-p", e.vhost)
		// Filters that match none of them: nothing moves.
		for _, filter := range [][]string{{"--source-queue", "elsewhere"}, {"--min-age", "1h"}} {
			out := e.ok(append([]string{"-q", "redrive", "-p", e.vhost, "rd-dlq"}, filter...)...)
			if strings.TrimSpace(out) != "state\tmoved\tfailed\tremaining\nfinished\t0\t0\t4" {
				t.Fatalf("redrive %v printed:\n%s", filter, out)
			}
		}
		e.fails(ExitUsage, []string{"--min-age"}, "redrive", "-p", e.vhost, "--min-age", "soon", "rd-dlq")
		out = e.ok("-q", "redrive", "-p", e.vhost, "--rate", "0.2", "--detach", "rd-dlq")
		fields := strings.Fields(strings.TrimSpace(out))
		if len(fields) != 4 || fields[0] != "id" || fields[3] != "running" {
			t.Fatalf("detached redrive printed:\n%s", out)
		}
		id := fields[2]
		out = e.ok("-q", "list_redrives", "id", "queue", "state", "rate")
		if !hasLine(out, id+"\trd-dlq\trunning\t0.2") {
			t.Fatalf("list_redrives:\n%s", out)
		}
		e.ok("cancel_redrive", id)
		out = e.ok("-q", "list_redrives", "id", "state", "moved", "failed")
		var moved int
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Split(line, "\t"); len(f) == 4 && f[0] == id {
				if f[1] != "cancelled" || f[3] != "0" {
					t.Fatalf("cancelled task: %q", line)
				}
				fmt.Sscan(f[2], &moved)
			}
		}
		if moved < 1 || moved > 3 {
			t.Fatalf("cancelled task moved %d of 4 (rate 0.2 a second: the first at once):\n%s", moved, out)
		}
		e.eventuallyOut([]string{fmt.Sprintf("rd-dlq\t%d", 4-moved), fmt.Sprintf("rd-work\t%d", 1+moved)}, "list_queues", "-p", e.vhost)
		e.ok("cancel_redrive", id) // an ended task stays
		if out := e.ok("-q", "list_redrives", "id", "state"); !hasLine(out, id+"\tcancelled") {
			t.Fatalf("list_redrives after a second cancel:\n%s", out)
		}
		e.ok("forget_redrive", id)
		e.fails(ExitUnavailable, []string{"Redrive task '" + id + "' not found"}, "cancel_redrive", id)
		e.fails(ExitUnavailable, []string{"Redrive task '" + id + "' not found"}, "forget_redrive", id)
	})
}
