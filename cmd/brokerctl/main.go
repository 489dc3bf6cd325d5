// Command brokerctl manages a brokerd (or RabbitMQ) broker through its
// management HTTP API, with rabbitmqctl's verbs. See internal/ctl/doc.go
// for the usage.
//
//	brokerctl [--url URL | -n HOST[:PORT]] [-p VHOST] VERB [ARGS...]
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/brokerd/brokerd/internal/ctl"
)

func main() {
	// An interrupt cancels the request in flight; the run then ends with
	// its error.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Main(ctx, os.Args[1:], ctl.OSEnv())
	stop()
	os.Exit(code)
}
