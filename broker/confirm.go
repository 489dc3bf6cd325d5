package broker

import (
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/stats"
)

// Publisher confirms.
//
// A channel in confirm mode numbers its publishes from 1 in arrival order.
// Each completes, ack or nack, in one of three places:
//
//   - at once, on the channel's reader goroutine, when nothing needs the
//     store (unroutable, direct reply-to, transient or in non-durable
//     queues only, refused by a reject-publish queue);
//   - inside Store.Apply, for a store that completes synchronously
//     (memstore);
//   - on the store's goroutine, after the fsync that covers the batch: a
//     WAL with group commit completes many publishes of many channels per
//     fsync, one after another, in Apply order.
//
// So completions arrive out of order (an unroutable publish completes
// before an earlier one that waits for the disk) but a channel's store
// completions arrive in order, in bursts.
//
// A completion only records its result: one byte in the channel's ring
// of unconfirmed tags, under confirmTracker.mu. Confirms go out in tag
// order from a watermark (every tag up to sent is confirmed): a run of
// consecutive acked tags becomes one basic.ack{multiple=true} for the
// last of them, a nacked tag its own basic.nack, and the run stops at the
// first tag not completed yet. A multiple ack therefore never covers a
// nacked or unfinished publish, and the client sees each tag confirmed
// exactly once, in order. A tag completed above an unfinished one waits in
// the ring until the tags below it complete, which is never longer than
// the store takes for them.
//
// The frames are formatted and queued (flush) by the connection's writer
// goroutine, before its next socket write (amqp.ChannelOut.Later); a
// completion only decides when to wake it:
//
//   - A completion that runs in a store's group, when the store implements
//     groupCompleter, leaves the wake-up to the end of the group: the
//     first one that finds the watermark's next tag completed asks the
//     store to hand the flush to the writer once the group's completions
//     have all run. A group commit therefore costs the store's goroutine
//     one byte store per publish and one hand-over per channel, and each
//     channel one ack frame (plus a frame per nack), however many of its
//     publishes the fsync covered.
//   - Any other completion (at once, inside Apply, a store failure, a store
//     without groups) hands the flush to the writer itself, as soon as it
//     finds something to send: no later event is guaranteed to come and
//     do it.
//
// A flush is due at most once at a time (queued), and it sends whatever
// has completed by the time it runs.
//
// Concurrency: mu guards every field but stats (atomics); out, grp,
// flushf, laterf and ctr are set once, by start, before the first publish
// is numbered. mu is taken under channel.mu (start), and by completions
// under whatever the store's Apply was called with (Queue.mu, VHost.mu
// shared: see broker/doc.go); under it only the connection's write lock
// (or a Direct's) is taken, to send. done calls AfterGroup and Later
// after releasing it.
type confirmTracker struct {
	mu     sync.Mutex
	out    amqp.ChannelOut
	grp    groupCompleter // the store's, if it completes in groups
	flushf func()         // t.flush, bound once
	laterf func()         // t.later, bound once
	closed bool
	// stats are the channel's publish counters (ratestats.go); atomic,
	// not mu's.
	stats  stats.Channel
	queued bool   // a flush is due, on the writer or at the end of the store's group
	sent   uint64 // every tag <= sent is confirmed to the client
	// ring holds the result of tag sent+1+i at index (sent+1+i) &
	// (len(ring)-1): confPending until the tag completes. Its length is a
	// power of two, at least the distance from sent to the highest
	// completed tag.
	ring []uint8
	ctr  *stats.Counters // the broker's: confirms sent are counted there
}

// Results in confirmTracker.ring.
const (
	confPending uint8 = iota
	confAck
	confNack
)

// confirmRingMin is the ring's initial length: a publisher that keeps
// fewer publishes unconfirmed never grows it.
const confirmRingMin = 64

// groupCompleter is implemented by a store whose completions come in
// groups: a WAL with group commit runs, on its goroutine, the done
// callbacks of every batch one fsync covered, one after another.
//
// AfterGroup may be called only from within a done callback that reports
// success. It arranges for fn to run once, on the goroutine that runs the
// callbacks, after that done has returned and the store has run every
// done of the same group, and before that goroutine waits for anything.
type groupCompleter interface {
	AfterGroup(fn func())
}

// start enables confirms on out. g is the store's group interface, nil if
// it has none.
func (t *confirmTracker) start(out amqp.ChannelOut, g groupCompleter, ctr *stats.Counters) {
	t.mu.Lock()
	t.out, t.grp, t.ctr = out, g, ctr
	t.flushf, t.laterf = t.flush, t.later
	t.ring = make([]uint8, confirmRingMin)
	t.mu.Unlock()
}

// done records that publish number seq completed: ack or nack. inGroup
// says it runs as a successful completion of the store's (see
// groupCompleter); then a flush is left to the end of the group.
func (t *confirmTracker) done(seq uint64, ack bool, inGroup bool) {
	res := confNack
	if ack {
		res = confAck
	}
	t.mu.Lock()
	if t.closed || t.out == nil || seq <= t.sent {
		t.mu.Unlock()
		return
	}
	if d := seq - t.sent; d > uint64(len(t.ring)) {
		t.growLocked(d)
	}
	t.ring[seq&uint64(len(t.ring)-1)] = res
	if seq != t.sent+1 || t.queued {
		// Nothing can go out before tag sent+1 completes; or a flush
		// is already due and will take this one too.
		t.mu.Unlock()
		return
	}
	t.queued = true
	g, f := t.grp, t.laterf
	t.mu.Unlock()
	if inGroup && g != nil {
		g.AfterGroup(f)
	} else {
		f()
	}
}

// later hands the flush to the connection's writer.
func (t *confirmTracker) later() { t.out.Later(t.flushf) }

// growLocked makes the ring hold at least n tags past sent.
func (t *confirmTracker) growLocked(n uint64) {
	size := uint64(len(t.ring))
	for size < n {
		size *= 2
	}
	ring := make([]uint8, size)
	oldMask, mask := uint64(len(t.ring)-1), size-1
	for tag := t.sent + 1; tag <= t.sent+uint64(len(t.ring)); tag++ {
		ring[tag&mask] = t.ring[tag&oldMask]
	}
	t.ring = ring
}

// flush sends what has completed since the last flush. The connection's
// writer goroutine runs it.
func (t *confirmTracker) flush() {
	t.mu.Lock()
	t.flushLocked()
	t.mu.Unlock()
}

// flushLocked sends confirms for the completed tags from sent+1 up to the
// first one not completed, and advances sent past them.
func (t *confirmTracker) flushLocked() {
	t.queued = false
	if t.closed {
		return
	}
	mask := uint64(len(t.ring) - 1)
	from, tag := t.sent+1, t.sent+1 // from: first tag of the current run of acks
	for {
		i := tag & mask
		res := t.ring[i]
		if res == confPending {
			break
		}
		t.ring[i] = confPending
		if res == confNack {
			t.sendAcksLocked(from, tag-1)
			t.ctr.Nacked.Add(1) // before the frame: a client that saw it sees the count
			t.out.Send(&amqp.BasicNack{DeliveryTag: tag})
			from = tag + 1
		}
		tag++
	}
	t.sendAcksLocked(from, tag-1)
	t.sent = tag - 1
}

// sendAcksLocked acks tags from..to (none if to < from): one frame, with
// multiple=true if it covers more than one.
func (t *confirmTracker) sendAcksLocked(from, to uint64) {
	if to >= from {
		t.ctr.Confirmed.Add(to - from + 1) // before the frame, as nacked
		t.stats.Confirm.Add(to - from + 1)
		t.out.Send(&amqp.BasicAck{DeliveryTag: to, Multiple: to > from})
	}
}

// close drops confirms not sent yet: the channel is gone.
func (t *confirmTracker) close() {
	t.mu.Lock()
	t.closed = true
	t.ring = nil
	t.mu.Unlock()
}
