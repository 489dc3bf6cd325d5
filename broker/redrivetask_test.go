// Tests of redrive tasks: paced, cancelled, resumed after a restart or crash.

package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func rtStart(t *testing.T, e *dsEnv, spec broker.RedriveSpec) string {
	t.Helper()
	spec.VHost = "/"
	id, err := e.b.Broker.StartRedrive(spec)
	if err != nil {
		t.Fatalf("start redrive: %v", err)
	}
	return id
}

// rtWaitPaced waits until task id has examined n messages and waits for
// its clock to reach at.
func rtWaitPaced(e *dsEnv, clk *brokertest.Clock, id string, n int64, at time.Time) {
	e.t.Helper()
	brokertest.Eventually(e.t, fmt.Sprintf("the task to examine %d and wait until %v", n, at), func() error {
		s, err := e.b.Broker.RedriveTask(id)
		if err != nil {
			return err
		}
		if s.Moved+s.Failed != n || !clk.ArmedAt(at) {
			return fmt.Errorf("state %s moved %d failed %d, waiting until %v: %t", s.State, s.Moved, s.Failed, at, clk.ArmedAt(at))
		}
		return nil
	})
}

// rtStep moves the clock 100 ms at a time (one message at 10 a second)
// until task id, started at t0 and paced at 10 a second, has examined n.
func rtStep(e *dsEnv, clk *brokertest.Clock, id string, t0 time.Time, from, n int64) {
	e.t.Helper()
	for p := from; p < n; p++ {
		clk.Advance(100 * time.Millisecond)
		rtWaitPaced(e, clk, id, p+1, t0.Add(time.Duration(p+1)*100*time.Millisecond))
	}
}

func rtWait(t *testing.T, e *dsEnv, id string) broker.RedriveTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.Wait)
	defer cancel()
	s, err := e.b.Broker.WaitRedrive(ctx, id)
	if err != nil {
		t.Fatalf("wait for redrive %s: %v (%+v)", id, err, s)
	}
	return s
}

// A task paced at 10 messages a second moves one at once and then one
// each 100 ms of its clock, no faster. Behind its pace (its clock jumped
// 2 s) it does not burst to catch up: it moves two and goes on at its
// pace. It finishes as soon as the queue's messages are all examined.
func TestRedriveTaskRate(t *testing.T) {
	clk := brokertest.NewClock()
	e := dsStart(t, dsGroups[0], brokertest.Config{Clock: clk})
	e.setup(nil)
	e.rdReject("src", 25, rdBodies("m", 25)...)
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	rtStep(e, clk, id, t0, 1, 11)
	if s, _ := e.b.Broker.RedriveTask(id); s.State != broker.RedriveRunning || s.Moved != 11 || s.Remaining != 14 {
		t.Fatalf("after 1 s: %+v", s)
	}
	// t0 + 3 s, 1.9 s behind: the message due moves, and one more (it
	// catches up by one slice, 50 ms), then the pace goes on from there.
	clk.Advance(2 * time.Second)
	rtWaitPaced(e, clk, id, 13, t0.Add(3050*time.Millisecond))
	rtStep(e, clk, id, t0.Add(1750*time.Millisecond), 13, 24)
	clk.Advance(100 * time.Millisecond) // the last: the task ends with it, not a turn later
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFinished || s.Moved != 25 || s.Failed != 0 || s.Remaining != 0 || s.Ended.IsZero() {
		t.Fatalf("finished task: %+v", s)
	}
	e.waitFor("src", 25, 25, 0)
	e.Expect("src", rdBodies("m", 25)...)
}

// Cancel stops a task between moves; what it moved stays moved; a second
// cancel changes nothing; forget removes the ended task.
func TestRedriveTaskCancel(t *testing.T) {
	clk := brokertest.NewClock()
	e := dsStart(t, dsGroups[0], brokertest.Config{Clock: clk})
	e.setup(nil)
	e.rdReject("src", 30, rdBodies("m", 30)...)
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	rtStep(e, clk, id, t0, 1, 11)
	if err := e.b.Broker.CancelRedrive(id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	s, err := e.b.Broker.RedriveTask(id)
	if err != nil || s.State != broker.RedriveCancelled || s.Moved != 11 || s.Remaining != 19 {
		t.Fatalf("cancelled task: %+v, %v", s, err)
	}
	clk.Advance(10 * time.Second) // nothing more moves
	e.waitFor("src", 11, 11, 0)
	e.waitFor("dlq", 19, 19, 0)
	if err := e.b.Broker.CancelRedrive(id); err != nil { // an ended task stays as it is
		t.Fatalf("second cancel: %v", err)
	}
	if s, err := e.b.Broker.RedriveTask(id); err != nil || s.State != broker.RedriveCancelled || s.Moved != 11 {
		t.Fatalf("after a second cancel: %+v, %v", s, err)
	}
	if err := e.b.Broker.ForgetRedrive(id); err != nil {
		t.Fatalf("forget: %v", err)
	}
	if _, err := e.b.Broker.RedriveTask(id); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("forgotten task: %v", err)
	}
	if err := e.b.Broker.CancelRedrive(id); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("cancel of a forgotten task: %v", err)
	}
}

// A task resumes after a restart where it stopped: its counts go on, and
// a message that failed before (its origin is gone) is neither retried
// nor counted again.
func TestRedriveTaskResumesAfterRestart(t *testing.T) {
	clk := brokertest.NewClock()
	e := dsStart(t, dsGroups[0], brokertest.Config{Clock: clk})
	e.setup(nil)
	e.queue("src2", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	e.rdReject("src", 10, rdBodies("a", 10)...)
	e.rdReject("src2", 11, "b0")
	e.rdReject("src", 25, rdBodies("c", 14)...)
	if _, err := e.QueueDelete("src2", false, false, false); err != nil {
		t.Fatalf("delete src2: %v", err)
	}
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	rtStep(e, clk, id, t0, 1, 11)
	if s, _ := e.b.Broker.RedriveTask(id); s.Moved != 10 || s.Failed != 1 {
		t.Fatalf("task before restart: %+v", s)
	}
	e.b.Restart()
	e.redial()

	// Resumed, the task moves one message at once (its pace restarts).
	t1 := clk.Now()
	rtWaitPaced(e, clk, id, 12, t1.Add(100*time.Millisecond))
	s, err := e.b.Broker.RedriveTask(id)
	if err != nil || s.State != broker.RedriveRunning || s.Moved != 11 || s.Failed != 1 {
		t.Fatalf("task after restart: %+v, %v", s, err)
	}
	rtStep(e, clk, id, t1.Add(-1100*time.Millisecond), 12, 24)
	clk.Advance(100 * time.Millisecond)
	s = rtWait(t, e, id)
	want := "no queue 'src2'"
	if s.State != broker.RedriveFinished || s.Moved != 24 || s.Failed != 1 || s.FailureReasons[want] != 1 ||
		len(s.Failures) != 1 || s.Failures[0].Reason != want || s.Remaining != 1 {
		t.Fatalf("resumed task: %+v", s)
	}
	e.Expect("src", append(rdBodies("a", 10), rdBodies("c", 14)...)...)
	e.Expect("dlq", "b0")

	e.b.Restart() // an ended task is listed after a restart as it ended
	got, err := e.b.Broker.RedriveTask(id)
	if err != nil || got.State != broker.RedriveFinished || got.Moved != 24 || got.Failed != 1 || !got.Ended.Equal(s.Ended.Truncate(time.Millisecond)) {
		t.Fatalf("ended task after restart: %+v, %v", got, err)
	}
}

// A crash in the middle of an unpaced task: after the restart every
// message is in exactly one queue, the task resumes and finishes, and its
// count of moves is exact (each move's batch carries the task's record).
func TestRedriveTaskCrash(t *testing.T) {
	const n = 200
	e, _, arm, bodies := rdRecorded(t, n)
	hit := arm()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq"})
	<-hit
	e.b.Crash()
	e.redial()
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFinished || s.Moved != n || s.Failed != 0 {
		t.Fatalf("task after the crash: %+v", s)
	}
	seen := drainOnce(t, e.Channel, "src", "dlq")
	for _, b := range bodies {
		if seen[b] != "src" {
			t.Fatalf("%q in %q, want src (%d messages)", b, seen[b], len(seen))
		}
	}
}

// A task checks its user's permissions: it cannot start without read on
// the source, and a message whose origin the user may not write to fails.
func TestRedriveTaskPermissions(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	e.rdReject("src", 2, "a", "b")
	br := e.b.Broker
	if err := br.PutUser(broker.UserSpec{Name: "ops", Password: "pw"}); err != nil {
		t.Fatalf("add user: %v", err)
	}
	if err := br.SetPermissions("ops", "/", "", "^dlq$", "^dlq$"); err != nil {
		t.Fatalf("set permissions: %v", err)
	}
	d, err := br.OpenDirect("ops", "/")
	if err != nil {
		t.Fatalf("open direct: %v", err)
	}
	defer d.Close()
	id, err := d.StartRedrive("dlq", broker.RedriveOptions{}, 0)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	s := rtWait(t, e, id)
	want := "write access to queue 'src' refused"
	if s.State != broker.RedriveFinished || s.Moved != 0 || s.Failed != 2 || s.FailureReasons[want] != 2 || s.User != "ops" {
		t.Fatalf("task without write on src: %+v", s)
	}
	if _, err := d.StartRedrive("src", broker.RedriveOptions{}, 0); err == nil {
		t.Fatalf("a task on a queue the user may not read started")
	}
}

// A task runs with its user's permissions as they are at each step:
// revoking them stops it, failed, with the reason, after what it moved.
func TestRedriveTaskStopsWhenPermissionsGo(t *testing.T) {
	clk := brokertest.NewClock()
	e := dsStart(t, dsGroups[0], brokertest.Config{Clock: clk})
	e.setup(nil)
	e.rdReject("src", 20, rdBodies("m", 20)...)
	t0 := clk.Now()
	id := rtStartAsOps(t, e, 10)
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	if err := e.b.Broker.SetPermissions("ops", "/", "", ".*", "^src$"); err != nil { // no read on dlq
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFailed || s.Moved != 1 || s.Error != "read access to queue 'dlq' in vhost '/' refused for user 'ops'" {
		t.Fatalf("task after its read permission went: %+v", s)
	}
	e.waitFor("dlq", 19, 19, 0)
}

// A task stopped by the broker's shutdown right after it started is not
// failed: it resumes after the restart and finishes.
func TestRedriveTaskSurvivesShutdownAtStart(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	e.rdReject("src", 3, "a", "b", "c")
	id := rtStartAsOps(t, e, RedriveSlowRate)
	e.b.Restart()
	if s, err := e.b.Broker.RedriveTask(id); err != nil || s.State != broker.RedriveRunning || s.Moved > 2 { // one before, one at once after
		t.Fatalf("task after the restart: %+v, %v", s, err)
	}
	if err := e.b.Broker.CancelRedrive(id); err != nil {
		t.Fatal(err)
	}
}

// RedriveSlowRate is a pace at which a test's task moves its first
// message and then waits for as long as any test runs.
const RedriveSlowRate = 0.001

// A redrive examines the messages its queue held when it began: a
// message whose origin dead-letters it straight back (a queue TTL of 0)
// arrives as a new message and is not moved again, so the task ends.
func TestRedriveTaskBoundedByStart(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(amqp091.Table{"x-message-ttl": int32(0)})
	e.PublishBodies("src", "m0", "m1")
	e.waitFor("dlq", 2, 2, 0)
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq"})
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFinished || s.Moved != 2 {
		t.Fatalf("task: %+v", s)
	}
	e.waitFor("dlq", 2, 2, 0) // back, dead-lettered again
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{})
	if r.Moved != 2 {
		t.Fatalf("synchronous redrive: %+v", r)
	}
}

// rtStartAsOps starts a task on dlq at rate as user "ops", made with
// every permission in "/".
func rtStartAsOps(t *testing.T, e *dsEnv, rate float64) string {
	t.Helper()
	br := e.b.Broker
	if err := br.PutUser(broker.UserSpec{Name: "ops", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	if err := br.SetPermissions("ops", "/", "", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	d, err := br.OpenDirect("ops", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	id, err := d.StartRedrive("dlq", broker.RedriveOptions{}, rate)
	if err != nil {
		t.Fatalf("start redrive as ops: %v", err)
	}
	return id
}
