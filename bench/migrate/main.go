// Command migrate is the client side of bench/migrate.sh, which measures
// the README's "Migrating from RabbitMQ": a RabbitMQ node holding a backlog
// in several queues while producers keep publishing to it, moved to brokerd
// by shovels, the producers switched over midway. Its commands:
//
//	migrate fill    -url RABBIT -n 1000000 -state S   # declare the queues (durable), publish the backlog
//	migrate produce -url RABBIT -rate 2000 -via rabbitmq -state S   # until SIGTERM (or -duration, -max)
//	migrate produce -url BROKERD -rate 2000 -via brokerd -state S   # continues the numbering
//	migrate depth   -url URL                           # ready messages: total, then per queue
//	migrate check   -url BROKERD -state S              # consume everything, verify, print the figures
//
// Every message is persistent, about -size bytes, and carries its stream
// (fill or live), queue and sequence number in its headers and its body
// (message.go). fill and produce publish with confirms, one connection per
// queue, and record in the -state file which numbers each broker confirmed
// (ledger.go); produce paces itself to -rate msgs/s over all queues,
// reconnects every 250 ms when its connection fails (a brokerd killed and
// restarted) and, on SIGTERM or SIGINT, stops publishing, waits up to
// -drain for the confirms out, writes the state and exits 0. check
// (check.go) consumes every queue and holds what arrived against the
// state: every confirmed number must be there once, or more than once
// only with every extra copy marked redelivered; it prints one JSON line
// and exits 1 on any loss, unmarked duplicate, stray, misrouted or
// altered message.
//
// The queues are PREFIX0 .. PREFIX(N-1) (-prefix migrate-q, -queues 5).
// Progress goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	// Publishers, consumers and the progress reporter write to it at once.
	stderr = &lockedWriter{w: stderr}
	if len(args) == 0 || !strings.Contains(" fill produce depth check ", " "+args[0]+" ") {
		fmt.Fprintln(stderr, "usage: migrate fill|produce|depth|check [flags] (-h for a command's flags)")
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("migrate "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "amqp://guest:guest@127.0.0.1:5672/", "broker `URL`")
	prefix := fs.String("prefix", "migrate-q", "queue name prefix")
	nq := fs.Int("queues", 5, "queues")
	state := fs.String("state", "migrate-state.json", "the producers' ledger `file` (fill and produce write it, check reads it)")
	size := fs.Int("size", 256, "message body bytes (fill, produce)")
	n := fs.Uint64("n", 1000000, "fill: messages over all queues")
	window := fs.Int("window", 1000, "fill, produce: unconfirmed publishes at most per queue")
	rate := fs.Float64("rate", 2000, "produce: msgs/s over all queues")
	via := fs.String("via", "", "produce: rabbitmq or brokerd, the broker behind -url (its messages' x-migrate-via)")
	duration := fs.Duration("duration", 0, "produce: stop after this long (0 = at SIGTERM or SIGINT)")
	most := fs.Uint64("max", 0, "produce: stop once this many messages per queue are published and settled (0 = no limit)")
	drain := fs.Duration("drain", 10*time.Second, "produce: at the stop, wait this long at most for the confirms out")
	prefetch := fs.Int("prefetch", 2000, "check: consumer prefetch")
	timeout := fs.Duration("timeout", 30*time.Minute, "check: give up consuming after this long")
	marker := fs.String("marker-header", "", "check: a header that marks a copy as redelivered, besides the redelivered flag")
	var times [4]int64
	fs.Int64Var(&times[0], "moved-from", 0, "check: unix ms the move began (export of the definitions)")
	fs.Int64Var(&times[1], "shovels-from", 0, "check: unix ms the shovels were created")
	fs.Int64Var(&times[2], "drained-at", 0, "check: unix ms RabbitMQ's queues were empty")
	fs.Int64Var(&times[3], "moved-at", 0, "check: unix ms the move ended (shovels deleted)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *nq < 1 || *size < bodyHeader || *window < 1 || *rate < 0 || *prefetch < 2 {
		fmt.Fprintf(stderr, "migrate %s: need no arguments, -queues >= 1, -size >= %d, -window >= 1, -rate >= 0, -prefetch >= 2\n", cmd, bodyHeader)
		return 2
	}
	queues := make([]string, *nq)
	for i := range queues {
		queues[i] = *prefix + strconv.Itoa(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "migrate %s: %v\n", cmd, err)
		return 1
	}

	switch cmd {
	case "depth":
		counts, err := depths(*url, queues)
		if err != nil {
			return fail(err)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		fmt.Fprintln(stdout, total, strings.Trim(fmt.Sprint(counts), "[]"))
		return 0

	case "fill", "produce":
		l, err := readLedger(*state)
		if err == nil {
			err = l.checkQueues(queues, *size)
		}
		if err != nil {
			return fail(err)
		}
		cfg := pubConfig{url: *url, queues: queues, size: *size, via: *via, window: *window, drain: *drain, log: stderr}
		p := producerLive
		stop := make(chan struct{})
		if cmd == "fill" {
			p, cfg.count, cfg.declare, cfg.via = producerFill, *n/uint64(*nq), true, "rabbitmq"
			if *n%uint64(*nq) != 0 {
				return fail(fmt.Errorf("-n %d is not a multiple of -queues %d", *n, *nq))
			}
		} else {
			if *via != "rabbitmq" && *via != "brokerd" {
				return fail(errors.New("-via must be rabbitmq or brokerd"))
			}
			cfg.rate, cfg.count = *rate, *most
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
			defer signal.Stop(sig)
			var after <-chan time.Time
			if *duration > 0 {
				after = time.After(*duration)
			}
			go func() {
				select {
				case <-sig:
				case <-after:
				case <-ctx.Done():
					return
				}
				close(stop)
			}()
		}
		var c counters
		start := time.Now()
		stopProgress := progress(stderr, cmd+" "+*via, &c)
		err = publishAll(ctx, cfg, l, p, stop, &c)
		stopProgress()
		elapsed := time.Since(start)
		if werr := l.write(*state); werr != nil {
			err = errors.Join(err, werr)
		}
		line, _ := json.Marshal(map[string]any{
			"command": cmd, "via": cfg.via, "sent": c.sent.Load(), "confirmed": c.confirmed.Load(),
			"nacked": c.nacked.Load(), "reconnects": c.reconnects.Load(), "seconds": elapsed.Seconds(),
			"confirmed_per_s": float64(c.confirmed.Load()) / elapsed.Seconds(),
		})
		fmt.Fprintln(stdout, string(line))
		if err != nil {
			return fail(err)
		}
		if cmd == "fill" && c.confirmed.Load() != *n {
			return fail(fmt.Errorf("%d of %d confirmed", c.confirmed.Load(), *n))
		}
		return 0

	case "check":
		l, err := readLedger(*state)
		if err == nil {
			err = l.checkQueues(queues, *size)
		}
		if err != nil {
			return fail(err)
		}
		res, err := check(ctx, checkConfig{url: *url, queues: queues, prefetch: *prefetch, timeout: *timeout, log: stderr, markerHeader: *marker}, l)
		if err != nil {
			return fail(err)
		}
		ms := func(a, b int64) float64 { return float64(b-a) / 1000 }
		if times[0] > 0 && times[3] > times[0] {
			res.MoveS = ms(times[0], times[3])
		}
		if times[1] > 0 && times[2] > times[1] {
			res.ShovelS = ms(times[1], times[2])
			res.ShovelMsgsPerS = float64(res.ViaRabbitMQ) / res.ShovelS
		}
		line, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(line))
		fmt.Fprintf(stderr, "migrate check: %d confirmed, %d delivered (%d unique: %d via RabbitMQ and the shovels, %d published to brokerd); lost %d, duplicates %d redelivered + %d unmarked (%d of them shovelled), unconfirmed that arrived %d of %d, strays %d, altered %d, misrouted %d\n",
			res.Confirmed, res.Deliveries, res.Unique, res.ViaRabbitMQ, res.ViaBrokerd, res.Lost, res.DuplicatesMarked, res.DuplicatesUnmarked, res.DuplicatesUnmarkedShovelled,
			res.UnconfirmedArrived, res.Unconfirmed, res.Strays, res.Altered, res.Misrouted)
		if res.MoveS > 0 {
			fmt.Fprintf(stderr, "migrate check: the move took %.1f s; the shovels emptied RabbitMQ in %.1f s, %d messages at %.0f msgs/s\n",
				res.MoveS, res.ShovelS, res.ViaRabbitMQ, res.ShovelMsgsPerS)
		}
		if res.failed() {
			fmt.Fprintf(stderr, "migrate check: FAILED: %s\n", res.why())
			return 1
		}
		return 0
	}
	return 2
}

// depths returns the ready messages of each queue (queue.declare passive).
func depths(url string, queues []string) ([]int, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	counts := make([]int, len(queues))
	for i, q := range queues {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		counts[i] = st.Messages
	}
	return counts, nil
}

// progress prints the counters every 5 s until the returned func is called.
func progress(w io.Writer, what string, c *counters) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		start, last := time.Now(), uint64(0)
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				conf := c.confirmed.Load()
				fmt.Fprintf(w, "migrate: %s %3.0fs: sent %d, confirmed %d (%.0f/s), nacked %d, reconnects %d\n",
					what, now.Sub(start).Seconds(), c.sent.Load(), conf, float64(conf-last)/5, c.nacked.Load(), c.reconnects.Load())
				last = conf
			}
		}
	}()
	return func() { close(quit); <-done }
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
