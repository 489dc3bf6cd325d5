package broker

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/stats"
)

// confirmClient checks confirms as a client sees them: every frame starts
// at the first unconfirmed tag, a multiple ack covers only publishes that
// completed with ack, and nothing is confirmed twice.
type confirmClient struct {
	t         *testing.T
	result    map[uint64]uint8 // how each tag completed; absent: pending
	expecting uint64           // first tag not confirmed yet
	frames    int
	later     funcQueue // given to Later, not run yet
}

func (c *confirmClient) Send(m amqp.Method) {
	c.t.Helper()
	c.frames++
	switch m := m.(type) {
	case *amqp.BasicAck:
		from := m.DeliveryTag
		if m.Multiple {
			from = c.expecting
		}
		if from != c.expecting || m.DeliveryTag < from {
			c.t.Fatalf("ack %+v while expecting %d", m, c.expecting)
		}
		for tag := from; tag <= m.DeliveryTag; tag++ {
			if c.result[tag] != confAck {
				c.t.Fatalf("ack %+v covers tag %d, completed %d", m, tag, c.result[tag])
			}
		}
		c.expecting = m.DeliveryTag + 1
	case *amqp.BasicNack:
		if m.Multiple || m.DeliveryTag != c.expecting || c.result[m.DeliveryTag] != confNack {
			c.t.Fatalf("nack %+v while expecting %d (completed %d)", m, c.expecting, c.result[m.DeliveryTag])
		}
		c.expecting++
	default:
		c.t.Fatalf("unexpected %s", m.Name())
	}
}

func (c *confirmClient) SendContent(amqp.Method, []byte, []byte) {
	c.t.Fatal("content on a confirm path")
}
func (c *confirmClient) Writable() bool    { return true }
func (c *confirmClient) Close(*amqp.Error) {}
func (c *confirmClient) Saturated() bool   { return false }

// Later keeps fn for the writer (runWriter).
func (c *confirmClient) Later(fn func()) { c.later.add(fn) }

// runWriter does what the connection's writer does before a write: it
// runs what Later was given.
func (c *confirmClient) runWriter() { c.later.run() }

// caughtUp checks that every tag below the first pending one is confirmed.
func (c *confirmClient) caughtUp(when string) {
	c.t.Helper()
	first := c.expecting
	for c.result[first] != 0 {
		first++
	}
	if c.expecting != first {
		c.t.Fatalf("%s: confirmed up to %d, but every tag up to %d completed", when, c.expecting-1, first-1)
	}
}

// funcQueue holds functions to run later, in order: what a store runs at
// the end of a group, what a connection's writer runs before a write.
type funcQueue []func()

func (q *funcQueue) add(fn func()) { *q = append(*q, fn) }

func (q *funcQueue) run() {
	fs := *q
	*q = nil
	for _, fn := range fs {
		fn()
	}
}

// fakeGroups is a groupCompleter whose groups end when the test says.
type fakeGroups struct{ after funcQueue }

func (g *fakeGroups) AfterGroup(fn func()) { g.after.add(fn) }

func (g *fakeGroups) end() { g.after.run() }

// TestConfirmTrackerRandomOrder completes publishes in random orders (runs
// of store completions in tag order, immediate ones anywhere, random
// group boundaries, nacks sprinkled in) and checks that the client sees
// each tag confirmed once, in order, never a multiple ack over a nack or a
// pending tag, and that nothing completed is left unsent once a group ends
// or an immediate completion has run and the writer after it. Only the
// writer sends.
func TestConfirmTrackerRandomOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		n := 1 + rng.IntN(300)
		immediate := make([]bool, n+1)
		for tag := 1; tag <= n; tag++ {
			immediate[tag] = rng.IntN(3) == 0
		}
		c := &confirmClient{t: t, result: map[uint64]uint8{}, expecting: 1}
		g := &fakeGroups{}
		var tr confirmTracker
		grouped := round%2 == 0
		if grouped {
			tr.start(c, g, &stats.Counters{})
		} else {
			tr.start(c, nil, &stats.Counters{})
		}
		complete := func(tag uint64, inGroup bool) {
			res := confAck
			if rng.IntN(5) == 0 {
				res = confNack
			}
			c.result[tag] = res
			frames := c.frames
			tr.done(tag, res == confAck, inGroup)
			if c.frames != frames {
				t.Fatalf("round %d: tag %d's completion sent a frame itself", round, tag)
			}
		}
		// Store completions come in tag order; immediate ones are
		// interleaved with them at random.
		var stored, imm []uint64
		for tag := 1; tag <= n; tag++ {
			if immediate[tag] {
				imm = append(imm, uint64(tag))
			} else {
				stored = append(stored, uint64(tag))
			}
		}
		rng.Shuffle(len(imm), func(i, j int) { imm[i], imm[j] = imm[j], imm[i] })
		for len(stored) > 0 || len(imm) > 0 {
			if len(imm) > 0 && (len(stored) == 0 || rng.IntN(2) == 0) {
				complete(imm[0], false)
				imm = imm[1:]
				c.runWriter()
				c.caughtUp("after an immediate completion")
				continue
			}
			k := 1 + rng.IntN(min(len(stored), 20)) // one group commit
			for _, tag := range stored[:k] {
				complete(tag, true)
			}
			stored = stored[k:]
			g.end()
			if len(c.later) > 1 {
				t.Fatalf("round %d: %d flushes handed to the writer for one group", round, len(c.later))
			}
			c.runWriter()
			c.caughtUp("after a group")
		}
		if c.expecting != uint64(n)+1 {
			t.Fatalf("round %d: confirmed up to %d of %d", round, c.expecting-1, n)
		}
	}
}

// countOut counts the frames sent; it runs what Later is given at once,
// as if the writer were always ready.
type countOut struct{ frames int }

func (o *countOut) Send(amqp.Method)                        { o.frames++ }
func (o *countOut) SendContent(amqp.Method, []byte, []byte) { o.frames++ }
func (o *countOut) Writable() bool                          { return true }
func (o *countOut) Close(*amqp.Error)                       {}
func (o *countOut) Saturated() bool                         { return false }
func (o *countOut) Later(fn func())                         { fn() }

// BenchmarkConfirmTracker measures a channel's confirms when the store
// completes its publishes in groups of the given size (group=1: every
// completion on its own, as a synchronous store does).
func BenchmarkConfirmTracker(b *testing.B) {
	for _, group := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			out := &countOut{}
			g := &fakeGroups{}
			var tr confirmTracker
			tr.start(out, g, &stats.Counters{})
			b.ReportAllocs()
			for i := 1; i <= b.N; i++ {
				tr.done(uint64(i), true, true)
				if i%group == 0 {
					g.end()
				}
			}
			g.end()
			b.ReportMetric(float64(out.frames)/float64(b.N), "frames/msg")
		})
	}
}
