// Command amqptool is the AMQP half of make-fixtures.sh: the steps that the
// management HTTP API cannot do itself (publish messages with chosen
// properties, hold a named connection with unacknowledged deliveries, watch
// how the server closes it) and the replay of
// rabbitmq-3.10-definitions.expect.json against a broker.
//
// It lives under testdata so that `go build ./...` and `go vet ./...` of the
// module ignore it; run it with `go run ./mgmt/testdata/amqptool SUBCOMMAND`.
//
//	amqptool publish-get -url URL -queue Q
//	    publish the four messages the /api/queues/{v}/{q}/get fixtures read.
//	amqptool hold -url URL -name NAME -exchange X -key K -queue Q -publish N -prefetch P
//	    publish N messages, consume Q with prefetch P without acking, print
//	    "ready" once P deliveries arrived, then wait until the server closes
//	    the connection and print its close code and text as JSON.
//	amqptool verify -url URL [-http URL] -defs FILE -expect FILE
//	    replay logins, routes and dead-letter cases; exit 1 on a mismatch.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: amqptool publish-get|hold|verify [flags]")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "publish-get":
		err = publishGet(args)
	case "hold":
		err = hold(args)
	case "verify":
		err = verify(args)
	default:
		err = fmt.Errorf("unknown subcommand %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "amqptool:", err)
		os.Exit(1)
	}
}
