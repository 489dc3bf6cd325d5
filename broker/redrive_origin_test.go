// Tests that redrive to origin goes by the broker's own record, never by x-death.

package broker_test

// Redrive to origin goes by the broker's own record of where it
// dead-lettered a message, never by x-death, which a publisher writes as
// it likes (issue 22, item 13).

import (
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// forgedDeath is an x-death header naming queue as a message's origin.
func forgedDeath(queue string) amqp091.Table {
	return amqp091.Table{"x-death": []any{amqp091.Table{
		"queue": queue, "reason": "rejected", "count": int64(1), "exchange": "",
		"routing-keys": []any{queue}, "time": time.Now().Truncate(time.Second),
	}}}
}

// The attack: a user allowed only to publish into the dead-letter
// exchange forges x-death naming another queue, and naming the
// administrator's exclusive queue; the administrator redrives the DLQ to
// origin (as the management API does, through a Direct). Nothing lands in
// either: the forged messages have no dead-letter record and fail as such,
// a genuine dead letter goes back to its origin, and one whose origin is
// an exclusive queue fails too (defect: both forged messages were moved
// where x-death said).
func TestRedriveToOriginIgnoresForgedXDeath(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	br := e.b.Broker
	e.Declare("payroll", nil, brokertest.Durable)
	// The administrator's exclusive queue, which dead-letters into dlq.
	if _, err := e.QueueDeclare("admin-excl", false, false, true, false,
		amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"}); err != nil {
		t.Fatal(err)
	}
	if err := br.PutUser(broker.UserSpec{Name: "mallory", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	if err := br.SetPermissions("mallory", "/", "", "^dlx$", ""); err != nil {
		t.Fatal(err)
	}
	mc, err := amqp091.Dial(fmt.Sprintf("amqp://mallory:pw@%s/", e.b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	mch := brokertest.NewSession(t, mc)
	for _, target := range []string{"payroll", "admin-excl", "src"} {
		if !mch.PublishAck("dlx", "dlq", amqp091.Publishing{Body: []byte("forged-" + target), Headers: forgedDeath(target)}) {
			t.Fatalf("forged publish naming %q nacked", target)
		}
	}
	e.rdReject("src", 4, "genuine")
	e.PublishBodies("admin-excl", "from-excl")
	e.reject(e.Expect("admin-excl", "from-excl")[0], false)
	e.waitFor("dlq", 5, 5, 0)

	d, err := br.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	id, err := d.StartRedrive("dlq", broker.RedriveOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := rtWait(t, e, id)
	exclusive := "queue 'admin-excl' is exclusive to a connection"
	if s.State != broker.RedriveFinished || s.Moved != 1 || s.Failed != 4 ||
		s.FailureReasons[broker.NoOriginRecord] != 3 || s.FailureReasons[exclusive] != 1 {
		t.Fatalf("redrive of forged and genuine dead letters: %+v", s)
	}
	for q, want := range map[string]int{"payroll": 0, "admin-excl": 0, "src": 1, "dlq": 4} {
		if got := tlReady(t, e.b, q); got != want {
			t.Fatalf("queue %q holds %d messages after the redrive, want %d", q, got, want)
		}
	}
	rdWantRedriven(t, e.Expect("src", "genuine")[0], "src", "rejected", 1)
	for _, d := range e.Expect("dlq", "forged-payroll", "forged-admin-excl", "forged-src", "from-excl") {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}

	// A filter on the source queue selects a message without a record by
	// its x-death, and still moves it nowhere.
	if !mch.PublishAck("dlx", "dlq", amqp091.Publishing{Body: []byte("forged-again"), Headers: forgedDeath("payroll")}) {
		t.Fatal("forged publish nacked")
	}
	e.waitFor("dlq", 1, 1, 0)
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{SourceQueue: "payroll"})
	if r.Moved != 0 || r.Failed != 1 || r.Failures[0].Reason != broker.NoOriginRecord || tlReady(t, e.b, "payroll") != 0 {
		t.Fatalf("redrive filtered on payroll: %+v, payroll holds %d", r, tlReady(t, e.b, "payroll"))
	}
}

// The record is kept with the entry on the disk store: after a crash (the
// WAL replayed) and after a restart (the index read) every dead letter
// still has it, a message published into the DLQ still has none, and a
// redrive to origin moves by it.
func TestRedriveOriginRecordSurvivesRestart(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{Backend: brokertest.Disk()})
	e.setup(nil)
	e.Publish("dlx", "dlq", amqp091.Publishing{Body: []byte("published"), Headers: forgedDeath("src")})
	e.rdReject("src", 3, "a", "b")
	check := func(when string) {
		t.Helper()
		origins, err := e.b.Broker.StoredOriginsForTest("/", "dlq")
		if err != nil {
			t.Fatal(err)
		}
		if len(origins) != 3 || origins[0] != nil {
			t.Fatalf("%s: %d stored dead letters, first origin %v; want 3, the first (published) without one", when, len(origins), origins)
		}
		for _, o := range origins[1:] {
			if o == nil || o.Queue != "src" || o.Reason != "rejected" || o.At < e.start.UnixMilli()-1000 {
				t.Fatalf("%s: origin %+v, want src, rejected, since the test began", when, o)
			}
		}
	}
	check("before")
	e.b.Crash()
	check("after a crash")
	e.b.Restart()
	check("after a restart")
	e.redial()
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{})
	if r.Moved != 2 || r.Failed != 1 || r.Failures[0].Reason != broker.NoOriginRecord {
		t.Fatalf("redrive after the restart: %+v", r)
	}
	e.waitFor("src", 2, 2, 0)
	e.Expect("src", "a", "b")
	e.Expect("dlq", "published")
}
