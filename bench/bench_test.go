package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/internal/brokertest"
)

func opts(url, scenario string) options {
	return options{
		url: url, scenario: scenario, n: 2000, size: 256, producers: 2, consumers: 2, confirm: 100,
		prefetch: 100, ack: "manual", queueType: "classic", ttl: 50 * time.Millisecond, ttlMode: "queue",
		maxLength: 100, queues: 3, timeout: 20 * time.Second, client: "amqp091",
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
