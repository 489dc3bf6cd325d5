package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/brokertest"
	"github.com/brokerd/brokerd/store"
)

// armedAt reports whether a timer of c is set to fire at t.
func (c *tlClock) armedAt(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tm := range c.timers {
		if tm.active && tm.at.Equal(t) {
			return true
		}
	}
	return false
}

// rtStartClock is rdStart on a clock the test moves.
func rtStartClock(t *testing.T, clk *tlClock, cfg brokertest.Config) *dsEnv {
	cfg.Broker.Now, cfg.Broker.TimerClock = clk.Now, clk.Timers()
	e := dsStart(t, dsGroups[0], cfg)
	e.setup(nil)
	return e
}

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
func rtWaitPaced(e *dsEnv, clk *tlClock, id string, n int64, at time.Time) {
	e.t.Helper()
	e.eventually(func() (bool, string) {
		s, err := e.b.Broker.RedriveTask(id)
		if err != nil {
			return false, err.Error()
		}
		return s.Moved+s.Failed == n && clk.armedAt(at),
			fmt.Sprintf("task: state %s moved %d failed %d, want %d examined and a wait until %v", s.State, s.Moved, s.Failed, n, at)
	})
}

func rtWait(t *testing.T, e *dsEnv, id string) broker.RedriveTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dsWait)
	defer cancel()
	s, err := e.b.Broker.WaitRedrive(ctx, id)
	if err != nil {
		t.Fatalf("wait for redrive %s: %v (%+v)", id, err, s)
	}
	return s
}

// A task paced at 10 messages a second moves one at once and then one
// each 100 ms of its clock, no faster; it finishes when the queue's
// matching messages are all examined.
func TestRedriveTaskRate(t *testing.T) {
	clk := tlNewClock()
	e := rtStartClock(t, clk, brokertest.Config{})
	e.rdReject("src", 25, rdBodies("m", 25)...)
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	for i, want := range []int64{11, 21} {
		clk.Advance(time.Second)
		rtWaitPaced(e, clk, id, want, t0.Add(time.Duration(want)*100*time.Millisecond))
		if s, _ := e.b.Broker.RedriveTask(id); s.State != broker.RedriveRunning || s.Moved != want || s.Remaining != 25-want {
			t.Fatalf("after %d s: %+v", i+1, s)
		}
	}
	clk.Advance(time.Second)
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFinished || s.Moved != 25 || s.Failed != 0 || s.Remaining != 0 || s.Ended.IsZero() {
		t.Fatalf("finished task: %+v", s)
	}
	e.waitFor("src", 25, 25, 0)
	e.get("src", rdBodies("m", 25)...)
}

// Cancel stops a task between moves; what it moved stays moved, and a
// second cancel forgets the ended task.
func TestRedriveTaskCancel(t *testing.T) {
	clk := tlNewClock()
	e := rtStartClock(t, clk, brokertest.Config{})
	e.rdReject("src", 30, rdBodies("m", 30)...)
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	clk.Advance(time.Second)
	rtWaitPaced(e, clk, id, 11, t0.Add(1100*time.Millisecond))
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
	if err := e.b.Broker.CancelRedrive(id); err != nil {
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
	clk := tlNewClock()
	e := rtStartClock(t, clk, brokertest.Config{})
	e.queue("src2", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	e.rdReject("src", 10, rdBodies("a", 10)...)
	e.rdReject("src2", 11, "b0")
	e.rdReject("src", 25, rdBodies("c", 14)...)
	if _, err := e.ch.QueueDelete("src2", false, false, false); err != nil {
		t.Fatalf("delete src2: %v", err)
	}
	t0 := clk.Now()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq", Rate: 10})
	rtWaitPaced(e, clk, id, 1, t0.Add(100*time.Millisecond))
	clk.Advance(time.Second)
	rtWaitPaced(e, clk, id, 11, t0.Add(1100*time.Millisecond))
	if s, _ := e.b.Broker.RedriveTask(id); s.Moved != 10 || s.Failed != 1 {
		t.Fatalf("task before restart: %+v", s)
	}
	e.b.Restart()
	e.conn, e.ch = e.b.Channel(t)

	// Resumed, the task moves one message at once (its pace restarts).
	s, err := e.b.Broker.RedriveTask(id)
	if err != nil || s.State != broker.RedriveRunning || s.Moved < 10 || s.Moved > 11 || s.Failed != 1 {
		t.Fatalf("task after restart: %+v, %v", s, err)
	}
	clk.Advance(10 * time.Second)
	s = rtWait(t, e, id)
	want := "no queue 'src2'"
	if s.State != broker.RedriveFinished || s.Moved != 24 || s.Failed != 1 || s.FailureReasons[want] != 1 ||
		len(s.Failures) != 1 || s.Failures[0].Reason != want || s.Remaining != 1 {
		t.Fatalf("resumed task: %+v", s)
	}
	e.get("src", append(rdBodies("a", 10), rdBodies("c", 14)...)...)
	e.get("dlq", "b0")

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
	rec := &rdStore{hit: make(chan struct{}), n: 15}
	e := dsStart(t, dsGroups[0], brokertest.Config{WrapStore: func(s store.Store) store.Store { rec.Store = s; return rec }})
	e.setup(nil)
	const n = 200
	bodies := rdBodies("c", n)
	e.rdReject("src", n, bodies...)
	rec.mu.Lock()
	rec.armed = true
	rec.mu.Unlock()
	id := rtStart(t, e, broker.RedriveSpec{Queue: "dlq"})
	<-rec.hit
	e.b.Crash()
	e.conn, e.ch = e.b.Channel(t)
	s := rtWait(t, e, id)
	if s.State != broker.RedriveFinished || s.Moved != n || s.Failed != 0 {
		t.Fatalf("task after the crash: %+v", s)
	}
	seen := drainOnce(t, e.ch, "src", "dlq")
	for _, b := range bodies {
		if seen[b] != "src" {
			t.Fatalf("%q in %q, want src (%d messages)", b, seen[b], len(seen))
		}
	}
}

// A task checks its user's permissions: it cannot start without read on
// the source, and a message whose origin the user may not write to fails.
func TestRedriveTaskPermissions(t *testing.T) {
	e := rdStart(t, nil)
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
