// Package brokertest starts a real broker on a loopback port for tests:
// the amqp server and the broker over a store from a Backend (memory by
// default, or whichever BROKERD_TEST_STORE names), wired as cmd/brokerd
// wires them, so tests drive it with a standard client and the same tests
// run over every store.
//
// It also holds the one dialect the behaviour tests speak, so that a test
// reads the same in every file:
//   - Start runs a broker (Config.Clock puts it on a fake Clock);
//   - Instance.Session is a connection and channel with the verbs Declare,
//     DeclareExchange, Bind, Publish (waiting for the confirm), Get,
//     Expect, Drain and Ready, each failing the test on an error;
//     TryPublish is the publish that expects a refusal;
//   - Eventually is the one poller, with one interval and one bound (Wait);
//   - the shared fakes: Clock and OffsetClock (time the test moves), Log
//     (a slog.Handler that records) and SpyStore (a store wrapper that
//     records the broker's writes and lets a test see or break its reads).
//
// Every helper fails the test through the testing.TB it was given, so it
// is called from that test's goroutine.
//
// # Concurrency
//
// A Session, like the testing.TB its helpers fail, belongs to the
// goroutine of its test. The fakes (Clock, OffsetClock, Log, SpyStore) and
// the memory-async backend are safe for concurrent use: the broker calls
// them from its own goroutines. Each guards its state with one mutex that
// is a leaf: no other lock is taken while it is held, and nothing outside
// the type is called under it (a SpyStore's hooks and the store it wraps,
// a deferred completion, run without it).
//
//	lock                   guards
//	registry               the backends by name
//	asyncStore.mu          the completions not yet run, closed
//	Clock.mu               the time, the goroutines' last readings, the timers
//	OffsetClock.mu         the offset, the timers and their wall timers
//	logRecords.mu          the lines recorded, Take's position
//	SpyStore.mu            the batches recorded
package brokertest
