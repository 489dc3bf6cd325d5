package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func opts(url, scenario string) options {
	return options{
		url: url, scenario: scenario, n: 2000, size: 256, producers: 2, consumers: 2, confirm: 100,
		prefetch: 100, ack: "manual", queueType: "classic", ttl: 50 * time.Millisecond, ttlMode: "queue",
		maxLength: 100, queues: 3, timeout: 20 * time.Second, client: "amqp091",
		delayMin: 100 * time.Millisecond, delayMax: time.Second, delayHeader: "x-delivery-time", seed: 1,
	}
}

// clients are the -client values every scenario test runs with.
var clients = []string{"amqp091", "raw"}

// TestScenarios runs each scenario briefly against a real broker and checks
// the counts it reports.
func TestScenarios(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, client := range clients {
		for _, sc := range []string{"publish", "consume", "e2e", "backlog", "fanout"} {
			t.Run(client+"/"+sc, func(t *testing.T) {
				o := opts(b.URL, sc)
				o.client = client
				res, err := run(context.Background(), o, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 || res.Nacked != 0 {
					t.Fatalf("result = %+v, want %d msgs, none lost, duplicated or nacked", res, o.n)
				}
				if res.MsgsPerS <= 0 {
					t.Fatalf("msgs_per_s = %v", res.MsgsPerS)
				}
				if sc == "e2e" || sc == "fanout" {
					if res.P50MS <= 0 || res.P99MS < res.P50MS || res.MaxMS < res.P99MS {
						t.Fatalf("latencies p50 %v p99 %v max %v", res.P50MS, res.P99MS, res.MaxMS)
					}
				}
				if sc == "backlog" && res.DrainMsgsPerS <= 0 {
					t.Fatalf("backlog drain rate = %v", res.DrainMsgsPerS)
				}
				if res.Client != client || res.ClientCPUS <= 0 {
					t.Fatalf("client %q cpu %v s, want %q and a positive time", res.Client, res.ClientCPUS, client)
				}
			})
		}
	}
}

// TestDeadLetterScenarios runs the dead-lettering scenarios: every message
// must arrive in the DLQ (or, for maxlen, stay in the source) exactly once.
func TestDeadLetterScenarios(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, c := range []struct {
		scenario string
		tweak    func(*options)
	}{
		{"dlx-reject", nil},
		{"maxlen", nil},
		{"ttl-expire", nil},
		{"ttl-expire", func(o *options) { o.ttlMode, o.ttl, o.ttlMax = "message", 20*time.Millisecond, 300*time.Millisecond }},
		{"dlx-reject", func(o *options) { o.client = "raw" }},
		{"maxlen", func(o *options) { o.client = "raw" }},
		{"ttl-expire", func(o *options) {
			o.client, o.ttlMode, o.ttl, o.ttlMax = "raw", "message", 20*time.Millisecond, 300*time.Millisecond
		}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			o := opts(b.URL, c.scenario)
			if c.tweak != nil {
				c.tweak(&o)
			}
			res, err := run(context.Background(), o, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 {
				t.Fatalf("result = %+v, want %d msgs, none lost or duplicated", res, o.n)
			}
			if c.scenario == "ttl-expire" && (res.P50MS < 0 || res.MaxMS > 5000) {
				t.Fatalf("lateness p50 %v max %v ms: expired before the deadline or absurdly late", res.P50MS, res.MaxMS)
			}
		})
	}
}

// TestDurationAndRate: -duration with -rate publishes about rate*duration.
func TestDurationAndRate(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	o := opts(b.URL, "e2e")
	o.n, o.duration, o.rate, o.producers = 0, time.Second, 500, 1
	res, err := run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Msgs < 400 || res.Msgs > 510 || res.Lost != 0 {
		t.Fatalf("1 s at 500 msgs/s: %+v", res)
	}
}

// TestDetectsLoss runs e2e through a proxy that swallows one delivery:
// the run must report it lost and the command must exit 1.
func TestDetectsLoss(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, client := range clients {
		proxy := startDroppingProxy(t, b.Addr)
		o := opts("amqp://guest:guest@"+proxy+"/", "e2e")
		o.producers, o.consumers, o.timeout, o.client = 1, 1, 3*time.Second, client
		res, err := run(context.Background(), o, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if res.Lost != 1 {
			t.Fatalf("%s: lost = %d, want 1 (result %+v)", client, res.Lost, res)
		}
	}

	var stdout, stderr bytes.Buffer
	code := realMain([]string{"-url", "amqp://guest:guest@" + startDroppingProxy(t, b.Addr) + "/", "-scenario", "e2e",
		"-n", "500", "-timeout", "3s", "-json"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit code %d with a lost message, want 1; stderr:\n%s", code, stderr.String())
	}
	var line result
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &line); err != nil {
		t.Fatalf("stdout is not one JSON line: %q: %v", stdout.String(), err)
	}
	if line.Lost != 1 || line.Scenario != "e2e" || !strings.Contains(line.URL, "xxx") {
		t.Fatalf("JSON line = %+v", line)
	}
}

// TestCompare runs a scenario against two brokers and prints both.
func TestCompare(t *testing.T) {
	b1 := brokertest.Start(t, brokertest.Config{})
	b2 := brokertest.Start(t, brokertest.Config{})
	var stdout, stderr bytes.Buffer
	code := realMain([]string{"-url", b1.URL, "-compare", b2.URL, "-scenario", "publish", "-n", "500", "-confirm", "50"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	if strings.Count(out, `"scenario":"publish"`) != 2 || !strings.Contains(out, "ratio (2nd/1st)") {
		t.Fatalf("compare output:\n%s", out)
	}
	if !strings.Contains(stderr.String(), "bench: publish against") {
		t.Fatalf("no progress on stderr:\n%s", stderr.String())
	}
}

func TestFlagValidation(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-size", "10"},
		{"-ack", "sometimes"},
		{"-ttl-max", "5s"}, // needs -ttl-mode message
		{"-scenario", "consume", "-duration", "1s"},
		{"-scenario", "delayed", "-delay-min", "2s", "-delay-max", "1s"},
		{"-scenario", "delayed", "-delay-header", "x-later"},
		{"-scenario", "delayed", "-background", "-hold"},
		{"-scenario", "delayed", "-duration", "1s"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

// startDroppingProxy forwards TCP to addr and swallows the 100th
// basic.deliver (its method, header and body frames) sent to the client.
func startDroppingProxy(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	var mu sync.Mutex
	delivers := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				defer c.Close()
				// Everything the server sends is framed (it answers the
				// protocol header with connection.start).
				fr := amqp.NewFrameReader(s)
				fr.SetMaxFrameSize(0)
				skip := map[uint16]int{} // channel → frames still to swallow
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					if skip[f.Channel] > 0 && f.Type != amqp.FrameMethod {
						// The dropped delivery's header and (single) body frame.
						if f.Type == amqp.FrameBody {
							skip[f.Channel] = 0
						}
						continue
					}
					if f.Type == amqp.FrameMethod {
						if m, err := amqp.DecodeMethod(f.Payload); err == nil {
							if _, ok := m.(*amqp.BasicDeliver); ok {
								mu.Lock()
								delivers++
								drop := delivers == 100
								mu.Unlock()
								if drop {
									skip[f.Channel] = 1
									continue
								}
							}
						}
					}
					if _, err := c.Write(amqp.AppendFrame(nil, f)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestScaleScenarios runs the scale scenarios at small sizes against an
// in-process broker (so its RSS is this process's) and checks their
// counts and the RSS fields.
func TestScaleScenarios(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, c := range []struct {
		name  string
		tweak func(*options)
		check func(t *testing.T, o options, res result)
	}{
		{"queues", func(o *options) { o.scenario, o.queues, o.consumers = "queues", 20, 3 }, func(t *testing.T, o options, res result) {
			if res.Queues != 20 || res.P50MS <= 0 {
				t.Fatalf("queues %d, p50 %v ms", res.Queues, res.P50MS)
			}
		}},
		{"fanout", func(o *options) { o.scenario, o.queues = "fanout", 10 }, func(t *testing.T, o options, res result) {
			if res.Queues != 10 || res.DeliveriesPerS < 9*res.MsgsPerS {
				t.Fatalf("queues %d, deliveries/s %v for %v msgs/s, want 10 copies each", res.Queues, res.DeliveriesPerS, res.MsgsPerS)
			}
		}},
		{"backlog", func(o *options) { o.scenario = "backlog" }, func(t *testing.T, o options, res result) {
			if res.DrainMsgsPerS <= 0 || res.BrokerRSSFilledMiB <= 0 || res.BrokerRSSFilledMiB > res.BrokerRSSPeakMiB {
				t.Fatalf("drain rate %v, rss filled %v MiB (peak %v)", res.DrainMsgsPerS, res.BrokerRSSFilledMiB, res.BrokerRSSPeakMiB)
			}
		}},
	} {
		for _, client := range clients {
			t.Run(client+"/"+c.name, func(t *testing.T) {
				o := opts(b.URL, c.name)
				o.client, o.brokerPID = client, os.Getpid()
				c.tweak(&o)
				res, err := run(context.Background(), o, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 || res.MsgsPerS <= 0 {
					t.Fatalf("result = %+v, want %d msgs, none lost or duplicated", res, o.n)
				}
				checkRSS(t, res)
				c.check(t, o, res)
			})
		}
	}
}

// checkRSS checks a result's broker RSS fields against this process's
// (the broker is in-process).
func checkRSS(t *testing.T, res result) {
	t.Helper()
	now, err := readRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if res.BrokerRSSEndMiB <= 0 || res.BrokerRSSPeakMiB < res.BrokerRSSEndMiB || res.BrokerRSSPeakMiB > 4*float64(now)/(1<<20) {
		t.Fatalf("broker rss peak %v end %v MiB (process now %v MiB)", res.BrokerRSSPeakMiB, res.BrokerRSSEndMiB, float64(now)/(1<<20))
	}
	line, _ := json.Marshal(res)
	if !bytes.Contains(line, []byte(`"broker_rss_peak_mib":`)) || !bytes.Contains(line, []byte(`"broker_rss_end_mib":`)) {
		t.Fatalf("no rss in %s", line)
	}
}

// TestQueuesFewChannels: with a broker allowing 8 channels, the raw client
// puts the 20 consumers of one connection on 8 channels (several a
// channel) and still gets every message once.
func TestQueuesFewChannels(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{ChannelMax: 8}})
	o := opts(b.URL, "queues")
	o.client, o.queues, o.consumers, o.ack = "raw", 20, 1, "auto"
	res, err := run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 || res.Queues != 20 {
		t.Fatalf("result = %+v", res)
	}
	line, _ := json.Marshal(res)
	if bytes.Contains(line, []byte("broker_rss")) {
		t.Fatalf("rss fields without -broker-pid: %s", line)
	}
}

// TestIdleConns holds 200 idle connections with 1 s heartbeats for 2.5 s
// (the broker drops a connection it has not heard from for 2.25 s) while
// the pair's e2e runs; none may be dropped.
func TestIdleConns(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := realMain([]string{"-url", b.URL, "-scenario", "idle-conns", "-conns", "200", "-heartbeat", "1",
				"-duration", "2500ms", "-rate", "400", "-client", client, "-broker-pid", strconv.Itoa(os.Getpid()), "-json"}, &stdout, &stderr)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
			}
			var res result
			if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
				t.Fatalf("stdout %q: %v", stdout.String(), err)
			}
			if res.Conns != 200 || res.ConnsDropped != 0 || res.ConnsOpenS <= 0 {
				t.Fatalf("conns %d dropped %d open %v s", res.Conns, res.ConnsDropped, res.ConnsOpenS)
			}
			if res.Msgs < 800 || res.Msgs > 1010 || res.Lost != 0 || res.Duplicated != 0 || res.P50MS <= 0 || res.Producers != 1 || res.Consumers != 1 {
				t.Fatalf("e2e of the pair: %+v, want ~1000 msgs, none lost", res)
			}
			checkRSS(t, res)
		})
	}
}

// TestIdleConnsTooMany: more connections than the hard RLIMIT_NOFILE
// allows fail the run before any is opened, saying why.
func TestIdleConnsTooMany(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	o := opts(b.URL, "idle-conns")
	o.conns, o.duration, o.rate = 1<<30, time.Second, 100
	_, err := run(context.Background(), o, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Fatalf("err = %v, want one naming RLIMIT_NOFILE", err)
	}
}

func TestParseVmRSS(t *testing.T) {
	v, err := parseVmRSS([]byte("Name:\tbrokerd\nVmHWM:\t  900 kB\nVmRSS:\t   1234 kB\nThreads:\t7\n"))
	if err != nil || v != 1234<<10 {
		t.Fatalf("= %d, %v", v, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tkworker\n")); err == nil {
		t.Fatal("no VmRSS line: no error")
	}
	if _, err := readRSS(1 << 30); err == nil {
		t.Fatal("rss of a pid that does not exist: no error")
	}
}

// TestDelayedScenario runs the delayed scenario with both clients and both
// headers (one run with the background pair): every message arrives once,
// none before its due time. Its timing is not asserted (a shared machine),
// only that lateness is not absurd.
func TestDelayedScenario(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, c := range []struct {
		client, header string
		background     bool
	}{
		{"amqp091", "x-delivery-time", false},
		{"raw", "x-delivery-time", true},
		{"amqp091", "x-delay", true},
		{"raw", "x-delay", false},
	} {
		t.Run(c.client+"/"+c.header, func(t *testing.T) {
			o := opts(b.URL, "delayed")
			o.client, o.delayHeader, o.delayMin, o.delayMax, o.seed = c.client, c.header, 20*time.Millisecond, 800*time.Millisecond, 7
			o.background, o.backgroundRate = c.background, 2000
			res, err := run(context.Background(), o, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 || res.Early != 0 {
				t.Fatalf("result = %+v, want %d msgs, none lost, duplicated or early", res, o.n)
			}
			if res.P50MS < 0 || res.MaxMS < res.P99MS || res.MaxMS > 5000 {
				t.Fatalf("lateness p50 %v p99 %v max %v ms", res.P50MS, res.P99MS, res.MaxMS)
			}
			if c.background && (res.BackgroundMsgsPerS <= 0 || res.BackgroundLost != 0 || res.BackgroundDuplicated != 0 || res.BackgroundError != "") {
				t.Fatalf("background: %+v", res)
			}
			if !c.background && res.BackgroundRate != 0 {
				t.Fatalf("background figures without -background: %+v", res)
			}
		})
	}
}

// TestDelayedHold publishes messages due in an hour: all confirmed, none
// delivered.
func TestDelayedHold(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	o := opts(b.URL, "delayed")
	o.hold, o.delayMin, o.delayMax, o.persistent, o.durable = true, time.Hour, 2*time.Hour, true, true
	res, err := run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Msgs != uint64(o.n) || res.Early != 0 || res.MsgsPerS <= 0 {
		t.Fatalf("result = %+v, want %d msgs held, none delivered", res, o.n)
	}
}

// TestDelayedLateness: the due time is the body's send time plus its
// delay, whole ms for x-delivery-time (the broker's due time exactly), and
// a delivery before it counts as early.
func TestDelayedLateness(t *testing.T) {
	sent := time.UnixMilli(1_700_000_000_123).Add(400 * time.Microsecond)
	info := bodyInfo{sent: sent, ttlMS: 100}
	for _, c := range []struct {
		header string
		at     time.Time
		late   float64
		early  bool
	}{
		{"x-delivery-time", time.UnixMilli(1_700_000_000_223), 0, false},
		{"x-delivery-time", time.UnixMilli(1_700_000_000_223).Add(-time.Microsecond), -0.001, true},
		{"x-delivery-time", time.UnixMilli(1_700_000_000_225), 2, false},
		{"x-delay", sent.Add(100 * time.Millisecond), 0, false},
		{"x-delay", time.UnixMilli(1_700_000_000_223), -0.4, true},
	} {
		r := &runner{o: options{delayHeader: c.header}}
		var early atomic.Uint64
		got := r.lateness(info, c.at, &early)
		if math.Abs(got-c.late) > 1e-9 || (early.Load() == 1) != c.early {
			t.Errorf("%s at %v: lateness %v ms, early %d; want %v, %t", c.header, c.at, got, early.Load(), c.late, c.early)
		}
	}
}

// TestRetryScenario runs the retry scenario each way: every message is
// acked once after its failures (k in 1..3: about 2 retries a message),
// and no retry comes back before its due time.
func TestRetryScenario(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, via := range retryVias {
		for _, mult := range []int{0, 10} {
			t.Run(via+"/"+strconv.Itoa(mult), func(t *testing.T) {
				o := opts(b.URL, "retry")
				o.n, o.retryVia, o.retryMin, o.retryMax, o.retryMult, o.retryFailures = 300, via, 20*time.Millisecond, 200*time.Millisecond, mult, 3
				res, err := run(context.Background(), o, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if res.Msgs != uint64(o.n) || res.Lost != 0 || res.Duplicated != 0 || res.RetryVia != via {
					t.Fatalf("result = %+v, want %d msgs, none lost or duplicated", res, o.n)
				}
				if res.Retries < uint64(o.n) || res.Retries > 3*uint64(o.n) {
					t.Fatalf("%d retries of %d messages, want 1 to 3 each", res.Retries, o.n)
				}
				if res.P50MS < 0 || res.MaxMS < res.P99MS {
					t.Fatalf("lateness p50 %v p99 %v max %v ms: a retry came back early", res.P50MS, res.P99MS, res.MaxMS)
				}
			})
		}
	}
}

// retryDelay follows brokerd's formula: linear, or exponential, capped.
func TestRetryDelay(t *testing.T) {
	o := options{retryMin: time.Second, retryMax: 10 * time.Second}
	for f, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 3 * time.Second, 20: 10 * time.Second} {
		if got := retryDelay(o, f); got != want {
			t.Errorf("linear, retry %d: %v, want %v", f, got, want)
		}
	}
	o.retryMult = 10
	for f, want := range map[int]time.Duration{1: time.Second, 2: 10 * time.Second, 3: 10 * time.Second} {
		if got := retryDelay(o, f); got != want {
			t.Errorf("multiplier 10, retry %d: %v, want %v", f, got, want)
		}
	}
	seen := map[int]int{}
	for i := range 3000 {
		seen[retryFailures(i, 3)]++
	}
	if len(seen) != 3 || seen[1] < 800 || seen[2] < 800 || seen[3] < 800 {
		t.Errorf("failures drawn from 1..3: %v", seen)
	}
}
