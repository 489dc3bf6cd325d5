package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Wait bounds every wait of the harness for something that must happen:
// a confirm, a delivery, a condition Eventually polls. It is generous (the
// tests run under -race on a loaded machine); a test that needs a wait to
// be short asserts the time itself.
const Wait = 5 * time.Second

// Context returns a context that ends after Wait, or when t ends: the
// bound of one raw amqp091 call that takes a context.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	t.Cleanup(cancel)
	return ctx
}

// PollInterval is how often Eventually evaluates its condition.
const PollInterval = 2 * time.Millisecond

// Condition is what Eventually polls: a func() bool that reports whether
// the awaited state holds, or a func() error that returns nil once it
// holds and otherwise says what it saw instead.
type Condition interface {
	func() bool | func() error
}

// Eventually polls cond every PollInterval until it holds and fails the
// test (t.Fatal) after Wait: "timed out waiting for <what>", followed, for
// a func() error, by the error of the last poll. It is the harness's one
// poller (NATS's checkFor), for states the broker offers no event for: a
// counter, a queue's depth after a store write lands, a log line. Where an
// event can be awaited (a delivery, a confirm, a channel close), wait for
// the event instead. It must be called from the test's goroutine.
func Eventually[C Condition](t testing.TB, what string, cond C) {
	t.Helper()
	var check func() error
	switch c := any(cond).(type) {
	case func() bool:
		check = func() error {
			if c() {
				return nil
			}
			return errNotYet
		}
	case func() error:
		check = c
	default:
		panic("unreachable: Condition has two types")
	}
	deadline := time.Now().Add(Wait)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for %s", Wait, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %v", Wait, what, err)
		}
		time.Sleep(PollInterval) // the polling interval: the states polled have no event to wait on
	}
}

var errNotYet = errors.New("not yet")
