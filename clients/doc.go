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
// The C client, librabbitmq, runs the round trip from a small program
// built against it; its command-line tools (amqp-tools) cannot declare queue
// arguments, select confirm mode, reject, or show headers: the Go side
// (amqp091-go) does those, amqp-publish publishes, amqp-consume consumes
// without acking (the message returns when it disconnects), and amqp-get
// takes the dead letter.
//
// A client that is not installed skips its test, naming the Debian or npm
// package to install; .ci/run installs them all.
//
// The clients, one test each: the Java client (java_test.go), php-amqplib
// (php_test.go), kombu and aio-pika (python_test.go; pika is driven by
// broker/protocol_test.go), amqplib (node_test.go), librabbitmq and
// amqp-tools (c_test.go). The programs are in testdata/.
//
// brokerd is built once, on first use (with -race when the tests run with
// it), and every test starts its own on a loopback port with a fresh data
// directory; it must exit 0 on SIGTERM and report no data race.
package clients
