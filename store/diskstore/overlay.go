package diskstore

import (
	"github.com/brokerd/brokerd/store"
)

// overlay is the state written to the WAL since the last checkpoint and
// not yet in the index: the records of one checkpoint interval, applied
// in LSN order. The store has an active overlay, which Apply changes, and
// while a checkpoint runs a frozen one, which nothing changes and which
// the checkpoint moves into segments and the index. Reads look at the
// active overlay, then the frozen one, then the index.
//
// An overlay is not safe for concurrent use: the store's mutex guards the
// active one; a frozen one is read-only, except for its levels' seq
// indexes, which window reads may sort, under the mutex (seqIndex).
type overlay struct {
	last uint64 // LSN of the last record applied; 0 before any (a replicated store: its position)

	// A replicated store's (replicated.go): the last proposal whose
	// batches the overlay holds (0: none), the WAL's last LSN when it was
	// frozen, the last entry of the group (and its term) whose changes it
	// and the overlays before it hold, and the membership as of then.
	lastProp             uint64
	walLast              uint64
	applied, appliedTerm uint64
	conf                 []byte

	// msgs holds the messages whose bodies arrived in this overlay, with
	// how many of its live entries refer to each. A message leaves when
	// its count falls to zero (published and acked in one interval): no
	// entry can refer to it again, so it never reaches a segment, and the
	// map holds only what is in flight.
	msgs map[store.MsgID]*ovMsg
	// older counts reference changes to messages stored before this
	// overlay: +1 per put that refers to one (a dead-lettered copy). The
	// deletes of older entries are counted at the checkpoint, when the
	// index says which message each referred to.
	older map[store.MsgID]int

	queues map[store.QueueID]*ovQueue
	meta   map[string][]byte // nil value: deleted

	// below is the frozen overlay this one was started over, while that
	// one's checkpoint runs (nil otherwise): apply finds the body sizes of
	// entries and messages it holds there, without reading the index.
	below *overlay

	bytes int64 // rough memory held: bodies, headers and per-entry overhead
	n     int   // records applied
}

type ovMsg struct {
	m    *store.Message
	refs int
}

// ovQueue is one queue's changes in an overlay.
type ovQueue struct {
	entries map[uint64]*ovEntry     // entries put in this overlay, by seq, updates applied
	dels    map[uint64]delMark      // seq → prio of deleted older entries
	upds    map[uint64]store.Update // latest update of older entries
	dropped bool                    // every older entry of the queue is gone
	lastSeq uint64                  // highest seq put in this overlay

	// levels are this overlay's changes per priority level: counter
	// deltas (queues.go) and the level's seqs in order (window.go).
	// pending and unsized say which counter deltas are not exact yet.
	levels  map[uint8]*ovLevel
	pending int // deletes in dels whose size is unknown (delMark.pending)
	unsized int // entries whose size is unknown
}

// delMark is a delete of an older entry in an overlay: the entry's
// priority, and whether the deleted size is still to be read from the
// index (queues.go). One map for both: a consumer's acks make one delete
// each, and a second map per delete cost a tenth of the broker's CPU.
type delMark uint16

const delPending delMark = 1 << 8

func (m delMark) prio() uint8     { return uint8(m) }
func (m delMark) isPending() bool { return m&delPending != 0 }

// ovEntry is an entry put in an overlay, with its body size when known.
type ovEntry struct {
	store.Entry
	om    *ovMsg // its message, if the overlay holds it (else the reference counts in older)
	size  uint32
	sized bool // false: the message was stored before the overlay and its body was not at hand (queues.go)
}

// ovPair is an entry and the message it alone put, allocated as one.
type ovPair struct {
	e ovEntry
	m ovMsg
}

// entryOverhead approximates an overlay entry's memory besides its body.
const entryOverhead = 160

// deleteOverhead approximates the memory of the delete of an entry older
// than the overlay (its dels entry, its place in the level's seq index,
// its pending size): about 84 bytes of heap were measured per delete in a
// run of 500,000. A drain of a deep queue is such deletes only, so they
// must count what they hold for checkpoints to bound it.
const deleteOverhead = 96

func newOverlay() *overlay {
	return &overlay{
		msgs:   make(map[store.MsgID]*ovMsg),
		older:  make(map[store.MsgID]int),
		queues: make(map[store.QueueID]*ovQueue),
		meta:   make(map[string][]byte),
	}
}

func (o *overlay) empty() bool { return o.n == 0 }

func (o *overlay) queue(q store.QueueID) *ovQueue {
	oq := o.queues[q]
	if oq == nil {
		oq = &ovQueue{entries: make(map[uint64]*ovEntry)}
		o.queues[q] = oq
	}
	return oq
}

func headerBytes(h *store.Header) int64 {
	if h == nil {
		return 0
	}
	n := int64(len(h.Exchange) + len(h.Props))
	for _, k := range h.RoutingKeys {
		n += int64(len(k)) + 16
	}
	return n
}

// apply applies one batch, whose WAL record has LSN lsn. fresh are the
// batch's messages whose bodies the record carries.
func (o *overlay) apply(b *store.Batch, fresh []*store.Message, lsn uint64) {
	o.last = lsn
	o.n++
	// The common batch, a publish to one queue, puts its one fresh message
	// once: its overlay entry and message are allocated together.
	var pair *ovPair
	if len(fresh) == 1 && len(b.Puts) == 1 && b.Puts[0].Msg.ID == fresh[0].ID && o.msgs[fresh[0].ID] == nil {
		pair = &ovPair{m: ovMsg{m: fresh[0]}}
		o.msgs[fresh[0].ID] = &pair.m
		o.bytes += int64(len(fresh[0].Body)) + headerBytes(&fresh[0].Header) + entryOverhead
		fresh = nil
	}
	for _, m := range fresh {
		if o.msgs[m.ID] == nil {
			o.msgs[m.ID] = &ovMsg{m: m}
			o.bytes += int64(len(m.Body)) + headerBytes(&m.Header) + entryOverhead
		}
	}
	for i := range b.Puts {
		var e *ovEntry
		var om *ovMsg // the entry's message, if this overlay holds it
		if pair != nil {
			e, om = &pair.e, &pair.m
		} else {
			e = new(ovEntry)
			om = o.msgs[b.Puts[i].Msg.ID]
		}
		e.Entry = b.Puts[i] // a copy: the caller reuses the batch
		oq := o.queue(e.Queue)
		if e.Seq <= oq.lastSeq { // else no put of this overlay has the seq
			if old := oq.entries[e.Seq]; old != nil {
				oq.removePut(old) // a put over a put: the later one stays
			}
		}
		if om != nil {
			e.size, e.sized = uint32(len(om.m.Body)), true
			e.om = om
			om.refs++
		} else {
			// The message is not this overlay's: its size is found below,
			// and its reference counts in older.
			e.size, e.sized = o.belowSize(&e.Entry)
			if e.sized {
				// The body is stored already (a dead-lettered copy, or a
				// message read back by a paging queue): keep only the id,
				// as a replayed record does, so the overlay does not hold
				// bodies its byte count does not include.
				e.Msg = &store.Message{ID: e.Msg.ID}
			}
			o.older[e.Msg.ID]++
		}
		oq.entries[e.Seq] = e
		oq.addPut(e)
		if e.Seq > oq.lastSeq {
			oq.lastSeq = e.Seq
		}
		o.bytes += entryOverhead + headerBytes(e.Header)
	}
	for _, u := range b.Updates {
		oq := o.queue(u.Queue)
		if e := oq.entries[u.Seq]; e != nil {
			e.SetFrom(&u)
			continue
		}
		if oq.upds == nil {
			oq.upds = make(map[uint64]store.Update)
		}
		oq.noteUpdate(u)
		oq.upds[u.Seq] = u
		o.bytes += entryOverhead
	}
	for _, r := range b.Deletes {
		oq := o.queue(r.Queue)
		if e := oq.entries[r.Seq]; e != nil {
			delete(oq.entries, r.Seq)
			o.unref(e)
			oq.removePut(e)
			continue
		}
		if oq.dels == nil {
			oq.dels = make(map[uint64]delMark)
		}
		o.countOlderDelete(oq, r)
		delete(oq.upds, r.Seq)
		o.bytes += deleteOverhead
	}
	for _, q := range b.DropQueues {
		oq := o.queue(q)
		for _, e := range oq.entries {
			o.unref(e)
		}
		clear(oq.entries)
		oq.dels, oq.upds = nil, nil
		oq.levels, oq.pending, oq.unsized = nil, 0, 0
		oq.dropped = true
		oq.lastSeq = 0 // a dropped queue has no seqs; its id is never reused
	}
	for _, op := range b.Meta {
		o.meta[op.Key] = op.Value
		o.bytes += int64(len(op.Key)+len(op.Value)) + 64
	}
}

// unref takes back e's reference to its message, e having left the
// overlay's entries.
func (o *overlay) unref(e *ovEntry) {
	if om := e.om; om != nil {
		if om.refs--; om.refs == 0 {
			delete(o.msgs, e.Msg.ID)
		}
		return
	}
	o.older[e.Msg.ID]--
}

// message returns the body-carrying message id if this overlay has it.
func (o *overlay) message(id store.MsgID) *store.Message {
	if om := o.msgs[id]; om != nil {
		return om.m
	}
	return nil
}
