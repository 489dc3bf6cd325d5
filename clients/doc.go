// Package clients holds no code: its tests drive a real brokerd process
// with the AMQP client libraries that applications use, each in its own
// language, to show that they work with brokerd unchanged.
//
// # The scenario
//
// Every client runs the same dead-lettering round trip, with its own names
// (prefix P, e.g. "java"):
//
//	exchange P.in (direct) --P.key--> queue P.work
//	    x-dead-letter-exchange    = P.dlx
//	    x-dead-letter-routing-key = P.dead
//	exchange P.dlx (direct) --P.dead--> queue P.dlq
//
// and then:
//
//  1. publish one persistent message to P.in with key P.key on a channel in
//     confirm mode, and wait for its basic.ack;
//  2. consume it from P.work and reject it with requeue=false;
//  3. consume it from P.dlq and read its headers with the client's own
//     types: x-death must be an array of one table with queue P.work,
//     reason "rejected", count 1 (a long), exchange P.in, routing-keys
//     [P.key] and a timestamp; x-first-death-* name the same death.
//
// The client program checks the types itself (they differ per language)
// and prints what it read as one line of JSON, which the Go test checks
// against the values above. The Node client also publishes ten messages
// and closes the connection at once, which must complete (amqplib writes
// connection.close while its publishes may still be in flight).
//
// The C client's command-line tools (amqp-tools) cannot declare queue
// arguments, select confirm mode, reject, or show headers: the Go side
// (amqp091-go) does those, amqp-publish publishes, amqp-consume consumes
// without acking (the message returns when it disconnects), and amqp-get
// takes the dead letter.
//
// A client that is not installed skips its test, naming the Debian or npm
// package to install; .ci/run installs them all.
//
// Each test builds nothing of its own: TestMain builds cmd/brokerd once
// (with -race when the tests run with it) and every test starts its own
// brokerd on a loopback port with a fresh data directory.
package clients
