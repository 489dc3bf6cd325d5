// Command bench measures an AMQP 0-9-1 broker — brokerd, RabbitMQ or any
// other — with the same scenarios, so figures can be put side by side.
//
//	go run ./bench -scenario e2e -n 100000 -size 1024 -confirm 1000
//	go run ./bench -scenario publish -url amqp://guest:guest@127.0.0.1:5672/ -compare amqp://guest:guest@127.0.0.1:5673/
//	bench -scenario idle-conns -conns 10000 -client raw -broker-pid $(pidof brokerd)
//
// Every message carries its producer, sequence number and send time in its
// body; the run verifies that each arrived exactly once and exits 1 if any
// was lost or duplicated. Progress goes to stderr once a second; the result
// is one JSON line on stdout (and a table unless -json).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: cpu profile: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	urls := []string{o.url}
	if o.compare != "" {
		urls = append(urls, o.compare)
	}
	var results []result
	failed := false
	pids := []int{o.brokerPID, o.comparePID}
	for i, u := range urls {
		ro := o
		ro.url, ro.brokerPID = u, pids[i]
		fmt.Fprintf(stderr, "bench: %s against %s\n", o.scenario, redact(u))
		r, err := run(ctx, ro, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %s against %s: %v\n", o.scenario, redact(u), err)
			return 1
		}
		line, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(line))
		results = append(results, r)
		if r.Lost > 0 || r.Duplicated > 0 || r.ConnsDropped > 0 || r.Early > 0 || r.BackgroundLost > 0 || r.BackgroundDuplicated > 0 || r.BackgroundError != "" {
			failed = true
		}
	}
	if !o.json {
		printTable(stdout, results)
	}
	if failed {
		fmt.Fprintln(stderr, "bench: FAILED: messages were lost, duplicated or delivered before their due time, or the broker dropped idle connections")
		return 1
	}
	return 0
}

// options are the command's flags.
type options struct {
	url        string
	scenario   string
	n          int
	duration   time.Duration
	size       int
	producers  int
	consumers  int
	confirm    int
	persistent bool
	durable    bool
	prefetch   int
	ack        string
	queueType  string
	ttl        time.Duration
	ttlMax     time.Duration
	ttlMode    string
	maxLength  int
	rate       float64
	queues     int
	json       bool
	compare    string
	timeout    time.Duration
	id         string // queue and exchange name prefix
	keep       bool   // leave the run's queues and exchanges in place
	client     string // amqp091 or raw
	conns      int    // idle-conns: connections to hold open
	heartbeat  int    // idle-conns: heartbeat interval in seconds
	brokerPID  int    // sample this process's RSS during the run (0 = none)
	comparePID int    // the -compare broker's process
	cpuProfile string // write the client's own CPU profile here
	// delayed: the delays, the header asking for them, their seed, the
	// publish-only mode, and the background pair.
	delayMin       time.Duration
	delayMax       time.Duration
	delayHeader    string
	seed           uint64
	hold           bool
	background     bool
	backgroundRate float64
	// The retry scenario (retry.go).
	retryVia      string
	retryMin      time.Duration
	retryMax      time.Duration
	retryMult     int
	retryFailures int
}

var scenarios = []string{"publish", "consume", "drain", "e2e", "dlx-reject", "ttl-expire", "maxlen", "backlog", "fanout", "queues", "idle-conns", "delayed", "retry"}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.url, "url", "amqp://guest:guest@127.0.0.1:5672/", "broker `URL`")
	fs.StringVar(&o.scenario, "scenario", "e2e", "one of "+strings.Join(scenarios, ", "))
	fs.IntVar(&o.n, "n", 0, "messages to publish (default 100000 unless -duration)")
	fs.DurationVar(&o.duration, "duration", 0, "publish for this long instead of -n messages")
	fs.IntVar(&o.size, "size", 1024, "message body size in bytes (at least 28)")
	fs.IntVar(&o.producers, "producers", 1, "publishing connections")
	fs.IntVar(&o.consumers, "consumers", 1, "consuming connections")
	fs.IntVar(&o.confirm, "confirm", 0, "publisher confirm window; 0 = no confirms")
	fs.BoolVar(&o.persistent, "persistent", false, "publish persistent messages (delivery mode 2) to durable queues")
	fs.BoolVar(&o.durable, "durable", false, "declare durable queues (implied by -persistent and quorum)")
	fs.IntVar(&o.prefetch, "prefetch", 1000, "consumer prefetch count (0 = unlimited)")
	fs.StringVar(&o.ack, "ack", "manual", "consumer acknowledgements: manual or auto")
	fs.StringVar(&o.queueType, "queue-type", "classic", "classic or quorum")
	fs.DurationVar(&o.ttl, "ttl", time.Second, "message TTL for ttl-expire")
	fs.DurationVar(&o.ttlMax, "ttl-max", 0, "with -ttl-mode message: TTLs are uniform in [ttl, ttl-max], published in random order")
	fs.StringVar(&o.ttlMode, "ttl-mode", "queue", "ttl-expire: queue (x-message-ttl) or message (expiration property)")
	fs.IntVar(&o.maxLength, "max-length", 1000, "x-max-length for maxlen")
	fs.Float64Var(&o.rate, "rate", 0, "pace all producers together to this many msgs/s (0 = as fast as possible)")
	fs.IntVar(&o.queues, "queues", 0, "queues: fanout's queues bound to the exchange (default 4), or the queues scenario's queues (default 1000)")
	fs.IntVar(&o.conns, "conns", 10000, "idle-conns: connections held open (raw client, heartbeats answered)")
	fs.IntVar(&o.heartbeat, "heartbeat", 10, "idle-conns: heartbeat interval in seconds the idle connections ask for")
	fs.IntVar(&o.brokerPID, "broker-pid", 0, "sample the RSS of the broker with this `PID` (same machine) every 100 ms: peak and end in the result")
	fs.IntVar(&o.comparePID, "compare-pid", 0, "as -broker-pid, for the -compare broker")
	fs.BoolVar(&o.json, "json", false, "print only the JSON result line on stdout")
	fs.StringVar(&o.compare, "compare", "", "run the same scenario against this second broker `URL` and compare")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for messages after this long")
	fs.StringVar(&o.id, "id", "", "name prefix of the run's queues and exchanges (default random); with -keep and scenario drain, a later run finds an earlier run's queue")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the client's CPU profile (go tool pprof) to `file`")
	fs.BoolVar(&o.keep, "keep", false, "leave the run's queues and exchanges in place (e.g. publish -keep, restart the broker, then drain)")
	fs.DurationVar(&o.delayMin, "delay-min", 100*time.Millisecond, "delayed: delays are uniform in [delay-min, delay-max] (whole ms)")
	fs.DurationVar(&o.delayMax, "delay-max", 60*time.Second, "delayed: see -delay-min")
	fs.StringVar(&o.delayHeader, "delay-header", "x-delivery-time", "delayed: the header asking for the delay: "+strings.Join(delayHeaders, " (absolute due time: lateness exact) or ")+" (ms from arrival)")
	fs.Uint64Var(&o.seed, "seed", 1, "delayed: seed of the random delays (the same seed, the same delays)")
	fs.BoolVar(&o.hold, "hold", false, "delayed: only publish (delays must outlast the run) and check none was delivered; with -keep the exchange keeps them")
	fs.BoolVar(&o.background, "background", false, "delayed: run a producer/consumer pair on a queue of its own at -background-rate meanwhile")
	fs.Float64Var(&o.backgroundRate, "background-rate", 20000, "delayed -background: the pair's rate in msgs/s")
	fs.StringVar(&o.retryVia, "retry-via", "native", "retry: how a failed message waits: native (reject requeue=true to a queue with x-delayed-retry-*), ttl-dlx (republish with a per-message expiration to one wait queue that dead-letters back) or ttl-dlx-levels (a wait queue per delay, x-message-ttl)")
	fs.DurationVar(&o.retryMin, "retry-min", time.Second, "retry: the first retry's delay")
	fs.DurationVar(&o.retryMax, "retry-max", 10*time.Second, "retry: the longest delay")
	fs.IntVar(&o.retryMult, "retry-multiplier", 0, "retry: 0 linear (min × f), else min × multiplier^(f-1) for the f-th retry")
	fs.IntVar(&o.retryFailures, "retry-failures", 3, "retry: each message fails k times, k uniform in 1..this, before it is acked")
	fs.StringVar(&o.client, "client", "amqp091", "client library for producers and consumers: amqp091 (github.com/rabbitmq/amqp091-go, what users run) or raw (pre-encoded frames over brokerd's codec, batched writes: a load generator that is not the bottleneck)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var problems []string
	if !contains(scenarios, o.scenario) {
		problems = append(problems, fmt.Sprintf("-scenario %q is not one of %s", o.scenario, strings.Join(scenarios, ", ")))
	}
	if o.scenario == "idle-conns" {
		// One pair at a modest pace keeps the broker serving while the
		// idle connections are held.
		if o.duration == 0 {
			o.duration = 30 * time.Second
		}
		if o.rate == 0 {
			o.rate = 1000
		}
		o.n = 0
		o.producers, o.consumers = 1, 1 // the pair
	}
	if o.scenario == "retry" && o.n == 0 {
		o.n = 20000
	}
	if o.n == 0 && o.duration == 0 {
		o.n = 100000
	}
	if o.queues == 0 {
		o.queues = 4
		if o.scenario == "queues" {
			o.queues = 1000
		}
	}
	if o.n < 0 || o.size < bodyHeader || o.producers < 1 || o.consumers < 1 || o.confirm < 0 || o.prefetch < 0 || o.queues < 1 || o.maxLength < 0 || o.rate < 0 {
		problems = append(problems, fmt.Sprintf("need -n >= 0, -size >= %d, -producers >= 1, -consumers >= 1, -queues >= 1, and non-negative -confirm, -prefetch, -max-length, -rate", bodyHeader))
	}
	if o.conns < 1 || o.heartbeat < 0 || o.heartbeat > 65535 || o.brokerPID < 0 || o.comparePID < 0 {
		problems = append(problems, "need -conns >= 1, -heartbeat in 0..65535 and non-negative -broker-pid, -compare-pid")
	}
	if o.client != "amqp091" && o.client != "raw" {
		problems = append(problems, "-client must be amqp091 or raw")
	}
	if o.ack != "manual" && o.ack != "auto" {
		problems = append(problems, "-ack must be manual or auto")
	}
	if o.queueType != "classic" && o.queueType != "quorum" {
		problems = append(problems, "-queue-type must be classic or quorum")
	}
	if o.ttlMode != "queue" && o.ttlMode != "message" {
		problems = append(problems, "-ttl-mode must be queue or message")
	}
	if o.ttlMax != 0 && (o.ttlMode != "message" || o.ttlMax < o.ttl) {
		problems = append(problems, "-ttl-max needs -ttl-mode message and -ttl-max >= -ttl")
	}
	if o.scenario == "delayed" {
		if o.delayMin < time.Millisecond || o.delayMax < o.delayMin || o.delayMax > 1000*time.Hour {
			problems = append(problems, "need 1ms <= -delay-min <= -delay-max <= 1000h")
		}
		if !contains(delayHeaders, o.delayHeader) {
			problems = append(problems, "-delay-header must be one of "+strings.Join(delayHeaders, ", "))
		}
		if o.background && (o.backgroundRate <= 0 || o.hold) {
			problems = append(problems, "-background needs -background-rate > 0 and no -hold")
		}
		if o.duration > 0 {
			problems = append(problems, "-duration does not apply to delayed; use -n")
		}
	}
	if !contains(retryVias, o.retryVia) || o.retryMin <= 0 || o.retryMax < o.retryMin || o.retryMult < 0 || o.retryFailures < 1 {
		problems = append(problems, "-retry-via must be one of "+strings.Join(retryVias, ", ")+"; need -retry-min > 0, -retry-max >= -retry-min, -retry-multiplier >= 0, -retry-failures >= 1")
	}
	if o.duration > 0 && (o.scenario == "consume" || o.scenario == "maxlen" || o.scenario == "ttl-expire" || o.scenario == "retry") {
		problems = append(problems, "-duration does not apply to "+o.scenario+"; use -n")
	}
	if len(problems) > 0 {
		return o, errors.New(strings.Join(problems, "; "))
	}
	if o.persistent || o.queueType == "quorum" || o.scenario == "queues" {
		o.durable = true
	}
	if o.id == "" {
		o.id = "bench-" + strconv.FormatUint(rand.Uint64()%1e9, 36) + "-"
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// redact hides the password in a URL for output.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// result is one run's outcome; its JSON form is the machine-readable line.
type result struct {
	Scenario   string  `json:"scenario"`
	URL        string  `json:"url"`
	Msgs       uint64  `json:"msgs"`
	Seconds    float64 `json:"seconds"`
	MsgsPerS   float64 `json:"msgs_per_s"`
	MBPerS     float64 `json:"mb_per_s"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
	Lost       uint64  `json:"lost"`
	Duplicated uint64  `json:"duplicated"`
	Nacked     uint64  `json:"nacked"`
	// DrainMsgsPerS is the consume rate of the backlog scenario.
	DrainMsgsPerS float64 `json:"drain_msgs_per_s,omitempty"`
	// DeliveriesPerS counts every copy (fanout: msgs_per_s × queues).
	DeliveriesPerS float64 `json:"deliveries_per_s,omitempty"`
	// RetryVia is the retry scenario's -retry-via; Retries, the
	// redeliveries it timed (the lateness samples).
	RetryVia string `json:"retry_via,omitempty"`
	Retries  uint64 `json:"retries,omitempty"`
	// Queues is the number of queues of fanout and queues.
	Queues int `json:"queues,omitempty"`
	// Conns is the number of idle connections idle-conns opened and held
	// (with heartbeats) for the run; ConnsDropped, those that ended before
	// the run did (a failure); ConnsOpenS, how long opening them took.
	Conns        int     `json:"conns,omitempty"`
	ConnsDropped int     `json:"conns_dropped,omitempty"`
	ConnsOpenS   float64 `json:"conns_open_s,omitempty"`
	// The broker's resident set (VmRSS of -broker-pid), sampled every
	// 100 ms from the start of the run: the peak, and at the end of the
	// scenario (before the run's queues are deleted). Omitted without a
	// pid.
	BrokerRSSPeakMiB float64 `json:"broker_rss_peak_mib,omitempty"`
	BrokerRSSEndMiB  float64 `json:"broker_rss_end_mib,omitempty"`
	// Early counts delayed's deliveries before their due time (with
	// -hold: messages in the bound queue after publishing); any fails the
	// run.
	Early uint64 `json:"early"`
	// The -background pair of delayed: its target and achieved rate
	// (arrivals over its run), e2e latency, losses and duplicates, and
	// the error that ended its producer early, if any.
	BackgroundRate       float64 `json:"background_rate,omitempty"`
	BackgroundMsgsPerS   float64 `json:"background_msgs_per_s,omitempty"`
	BackgroundP50MS      float64 `json:"background_p50_ms,omitempty"`
	BackgroundP99MS      float64 `json:"background_p99_ms,omitempty"`
	BackgroundMaxMS      float64 `json:"background_max_ms,omitempty"`
	BackgroundLost       uint64  `json:"background_lost,omitempty"`
	BackgroundDuplicated uint64  `json:"background_duplicated,omitempty"`
	BackgroundError      string  `json:"background_error,omitempty"`
	// BrokerRSSFilledMiB is backlog's sample once the queue is full.
	BrokerRSSFilledMiB float64 `json:"broker_rss_filled_mib,omitempty"`
	// Conditions.
	Size       int     `json:"size"`
	Producers  int     `json:"producers"`
	Consumers  int     `json:"consumers"`
	Confirm    int     `json:"confirm"`
	Persistent bool    `json:"persistent"`
	Prefetch   int     `json:"prefetch"`
	Ack        string  `json:"ack"`
	QueueType  string  `json:"queue_type"`
	Rate       float64 `json:"rate,omitempty"`
	Latency    string  `json:"latency"` // what p50/p99/max measure
	Client     string  `json:"client"`
	// ClientCPUS is the CPU time (user + system) the benchmark process
	// used during the run, so a reader can tell whether the client was
	// the bottleneck.
	ClientCPUS float64 `json:"client_cpu_s"`
}

func printTable(w io.Writer, rs []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "\t"
	for _, r := range rs {
		head += redact(r.URL) + "\t"
	}
	if len(rs) == 2 {
		head += "ratio (2nd/1st)\t"
	}
	fmt.Fprintln(tw, head)
	row := func(name string, f func(r result) float64, format string) {
		line := name + "\t"
		for _, r := range rs {
			line += fmt.Sprintf(format, f(r)) + "\t"
		}
		if len(rs) == 2 {
			if a := f(rs[0]); a != 0 {
				line += fmt.Sprintf("%.2f", f(rs[1])/a) + "\t"
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	row("msgs", func(r result) float64 { return float64(r.Msgs) }, "%.0f")
	row("client cpu s", func(r result) float64 { return r.ClientCPUS }, "%.2f")
	row("msgs/s", func(r result) float64 { return r.MsgsPerS }, "%.0f")
	row("MB/s", func(r result) float64 { return r.MBPerS }, "%.1f")
	if rs[0].DrainMsgsPerS > 0 {
		row("drain msgs/s", func(r result) float64 { return r.DrainMsgsPerS }, "%.0f")
	}
	if rs[0].DeliveriesPerS > 0 {
		row("deliveries/s", func(r result) float64 { return r.DeliveriesPerS }, "%.0f")
	}
	if rs[0].Retries > 0 {
		row("retries", func(r result) float64 { return float64(r.Retries) }, "%.0f")
	}
	if rs[0].Conns > 0 {
		row("idle conns", func(r result) float64 { return float64(r.Conns) }, "%.0f")
		row("conns dropped", func(r result) float64 { return float64(r.ConnsDropped) }, "%.0f")
		row("conns open s", func(r result) float64 { return r.ConnsOpenS }, "%.2f")
	}
	if rs[0].BrokerRSSPeakMiB > 0 {
		row("broker RSS peak MiB", func(r result) float64 { return r.BrokerRSSPeakMiB }, "%.1f")
		row("broker RSS end MiB", func(r result) float64 { return r.BrokerRSSEndMiB }, "%.1f")
		if rs[0].BrokerRSSFilledMiB > 0 {
			row("broker RSS filled MiB", func(r result) float64 { return r.BrokerRSSFilledMiB }, "%.1f")
		}
	}
	row("p50 ms", func(r result) float64 { return r.P50MS }, "%.2f")
	row("p99 ms", func(r result) float64 { return r.P99MS }, "%.2f")
	row("max ms", func(r result) float64 { return r.MaxMS }, "%.2f")
	row("lost", func(r result) float64 { return float64(r.Lost) }, "%.0f")
	row("duplicated", func(r result) float64 { return float64(r.Duplicated) }, "%.0f")
	if rs[0].Scenario == "delayed" {
		row("early", func(r result) float64 { return float64(r.Early) }, "%.0f")
	}
	if rs[0].BackgroundRate > 0 {
		row("background msgs/s", func(r result) float64 { return r.BackgroundMsgsPerS }, "%.0f")
		row("background p99 ms", func(r result) float64 { return r.BackgroundP99MS }, "%.2f")
		row("background lost", func(r result) float64 { return float64(r.BackgroundLost) }, "%.0f")
	}
	tw.Flush()
	r := rs[0]
	fmt.Fprintf(w, "scenario %s: %d B bodies, %d producers, %d consumers, confirm window %d, persistent %t, prefetch %d, %s ack, %s queues; latency = %s\n",
		r.Scenario, r.Size, r.Producers, r.Consumers, r.Confirm, r.Persistent, r.Prefetch, r.Ack, r.QueueType, r.Latency)
}
