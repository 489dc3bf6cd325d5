package store

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
)

// QueueID identifies a queue for the store. The broker assigns it when a
// durable queue is first declared and keeps it in the queue's definition;
// it is never reused.
type QueueID uint64

// VolatileQueue is the QueueID bit of a volatile queue: one whose entries
// hold transient data that a broker keeps in the store only to bound its
// memory (transient messages, and queues that do not survive a restart,
// paged out of memory). Nothing of a volatile queue needs to survive a
// restart, and the broker drops every volatile queue when it recovers. So:
//
//   - A batch that changes only volatile queues (no definitions) is
//     written without waiting for an fsync: its done runs once it is
//     written, and a disk store does not recover it after a crash. Nor does
//     it recover what a later batch changes in volatile queues: those
//     changes may name entries that are gone.
//   - A message such a batch stores must never be referred to by a put
//     into a non-volatile queue (it may not survive a crash): a broker
//     that pages a persistent message into a volatile queue gives it a
//     message of its own, with its own id.
//
// Everything else — reads, counters, deadlines — works for volatile queues
// as for any other.
const VolatileQueue QueueID = 1 << 61

// Volatile reports whether q names a volatile queue.
func (q QueueID) Volatile() bool { return q&VolatileQueue != 0 }

// MsgID identifies a stored message. IDs are allocated by the store
// (AllocMsgID) and never reused within one store.
type MsgID uint64

// Ref names one entry. An entry's place is (queue, priority level, seq):
// Seq is unique within the queue across all its levels (the queue hands
// out one sequence for every level), so (Queue, Seq) alone identifies the
// entry; Prio says which level's order it belongs to. A disk index keys
// entries by (Queue, Prio, Seq) so each level pages on its own cursor.
type Ref struct {
	Queue QueueID
	// Prio is the queue's priority level the entry is in: the message's
	// priority capped at the queue's x-max-priority, 0 in a queue without
	// priorities. It is fixed for the entry's life.
	Prio uint8
	Seq  uint64
}

// Header is what routing and delivery need besides the body: the exchange
// the message was published (or dead-lettered) to, its routing keys (the
// publish key first, then CC and BCC keys) and its AMQP content-header
// properties exactly as they are delivered (flags + property list).
type Header struct {
	Exchange    string
	RoutingKeys []string
	Props       []byte
}

// Message is an immutable stored message. Its fields must not be modified
// after it has been passed to Apply.
type Message struct {
	ID         MsgID
	Header     Header
	Body       []byte
	Persistent bool
	// Stored is set by a disk store once the message's body is in its
	// log: a later batch that lists the message again (a dead-lettered
	// copy) refers to it instead of writing the body twice. Only stores
	// touch it.
	Stored atomic.Bool
}

// Entry is one message's place in one queue.
type Entry struct {
	Ref
	Msg *Message
	// Header, when non-nil, replaces Msg.Header for this entry (a
	// dead-lettered copy carries rewritten properties and routing keys).
	Header *Header
	// Deadline is the expiry time in unix milliseconds; 0 means none.
	Deadline int64
	// DeliveryCount counts the entry's returns to its queue after a
	// delivery. Which returns it counts is the broker's choice, per
	// queue: in a queue without delayed retry, every return (nack/reject
	// with requeue, channel close, recover); in a queue with delayed
	// retry, the failed ones only (RabbitMQ 4.3's delivery-count: reject
	// with requeue, channel or connection loss), which its backoff and
	// delivery limit use. The store keeps it and gives it no meaning.
	DeliveryCount uint32
	// AcquiredCount is how many times the entry came back to its queue
	// after a delivery, for any reason (RabbitMQ 4.3's acquired-count),
	// where the broker keeps it apart from DeliveryCount (queues with
	// delayed retry); 0 where it does not. The store gives it no meaning.
	AcquiredCount uint32
	// ReadyAt, when non-zero, is the time (unix milliseconds) before
	// which the entry must not be delivered: a requeued message waiting
	// out its retry delay. 0 means ready. The store keeps it and does
	// not act on it; the broker does (a restart keeps the due time).
	ReadyAt int64
	// DeadLetter is non-empty while the entry waits in its queue's
	// dead-letter backlog (at-least-once dead-lettering found no route):
	// the reason it is being dead-lettered for. Such an entry is not
	// delivered; it is forwarded once a route exists.
	DeadLetter string
	// DeadAt is when that death happened (unix milliseconds), the time
	// x-death records when the entry is finally forwarded.
	DeadAt int64
	// Origin, when non-nil, is the broker's record of where the entry
	// was dead-lettered from (see Origin). It is fixed for the entry's
	// life.
	Origin *Origin
}

// Origin is the broker's own record of where a message was dead-lettered
// from, kept with the copy the broker put into each target queue, so that
// what moves a dead letter back to its origin (a redrive) never trusts the
// x-death header, which any publisher can write. An entry the broker did
// not make by dead-lettering (published, redriven), or dead-lettered by a
// store written before this record existed, has none. An Origin is
// immutable once passed to Apply: entries may share one.
type Origin struct {
	Queue  string // the source queue's name, in the entry's vhost; never empty
	Reason string // why it was dead-lettered: rejected, expired, maxlen, delivery_limit
	At     int64  // when, unix milliseconds
}

// EffectiveHeader returns the entry's own header if it has one, else the
// message's.
func (e *Entry) EffectiveHeader() *Header {
	if e.Header != nil {
		return e.Header
	}
	return &e.Msg.Header
}

// EntryMeta is an entry without its message body: what a paging queue keeps
// resident or reads ahead. Its fields mean what Entry's do. Header, when
// non-nil, may be shared with the store and other readers: it must not be
// modified.
type EntryMeta struct {
	Ref
	Msg MsgID
	// Size is the message's body size in bytes, so byte limits and
	// counters need no body.
	Size          uint32
	Deadline      int64
	DeliveryCount uint32
	AcquiredCount uint32
	ReadyAt       int64
	DeadLetter    string
	DeadAt        int64
	// Header is the entry's own (dead-lettered) header, nil if it has
	// none and the message's header applies.
	Header *Header
	// Origin is the entry's dead-letter record, nil if it has none. It
	// may be shared with the store and other readers: it must not be
	// modified.
	Origin *Origin
}

// LevelState counts one priority level's entries: every stored entry of
// the level, ready and dead-letter backlog alike.
type LevelState struct {
	Prio  uint8
	Count int64 // entries
	Bytes int64 // sum of their body sizes
}

// QueueState is one queue's counters. A store keeps it up to date on every
// Apply, never by scanning entries, so recovery reads one per queue instead
// of the queue's entries.
type QueueState struct {
	// LastSeq is what LastSeq returns for the queue.
	LastSeq uint64
	// Levels are the queue's non-empty levels, in ascending Prio order.
	Levels []LevelState
}

// Update sets the mutable fields of an existing entry: every one of them,
// so a field the update leaves zero becomes zero (an update that changes
// the delivery count of an entry waiting out a retry delay carries its
// ReadyAt too). The fields mean what Entry's do.
type Update struct {
	Ref
	DeliveryCount uint32
	AcquiredCount uint32
	ReadyAt       int64
	DeadLetter    string
	DeadAt        int64
}

// SetFrom sets e's mutable fields to u's; u names e (the caller checks).
// Stores apply updates with it, so a field added to Update is applied
// everywhere.
func (e *Entry) SetFrom(u *Update) {
	e.DeliveryCount, e.AcquiredCount, e.ReadyAt = u.DeliveryCount, u.AcquiredCount, u.ReadyAt
	e.DeadLetter, e.DeadAt = u.DeadLetter, u.DeadAt
}

// SetFrom sets m's mutable fields to u's, as Entry.SetFrom does.
func (m *EntryMeta) SetFrom(u *Update) {
	m.DeliveryCount, m.AcquiredCount, m.ReadyAt = u.DeliveryCount, u.AcquiredCount, u.ReadyAt
	m.DeadLetter, m.DeadAt = u.DeadLetter, u.DeadAt
}

// Meta returns e's metadata, with size its body size. Header and Origin
// are shared with e.
func (e *Entry) Meta(size uint32) EntryMeta {
	return EntryMeta{
		Ref:           e.Ref,
		Msg:           e.Msg.ID,
		Size:          size,
		Deadline:      e.Deadline,
		DeliveryCount: e.DeliveryCount,
		AcquiredCount: e.AcquiredCount,
		ReadyAt:       e.ReadyAt,
		DeadLetter:    e.DeadLetter,
		DeadAt:        e.DeadAt,
		Header:        e.Header,
		Origin:        e.Origin,
	}
}

// MetaOp puts (Value non-nil) or deletes (Value nil) one definition.
type MetaOp struct {
	Key   string
	Value []byte
}

// Batch is one atomic change. Every message a Put refers to must be stored
// already or be listed in Messages; listing a message that is already
// stored is allowed and does not write it again (a dead-lettered message
// moves to new entries without its body being copied). Within a batch the
// order of application is: Messages, Puts, Updates, Deletes, DropQueues,
// Meta; a batch must not put and delete the same Ref.
type Batch struct {
	Messages   []*Message
	Puts       []Entry
	Updates    []Update
	Deletes    []Ref
	DropQueues []QueueID // remove every entry of these queues
	Meta       []MetaOp
}

// Clone returns a copy of b that shares no slice with it (only the
// messages and headers, which are immutable): what code that keeps a batch
// past Apply (a recorder in a test) must keep, as the caller reuses b.
func (b *Batch) Clone() Batch {
	return Batch{
		Messages:   slices.Clone(b.Messages),
		Puts:       slices.Clone(b.Puts),
		Updates:    slices.Clone(b.Updates),
		Deletes:    slices.Clone(b.Deletes),
		DropQueues: slices.Clone(b.DropQueues),
		Meta:       slices.Clone(b.Meta),
	}
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Messages) == 0 && len(b.Puts) == 0 && len(b.Updates) == 0 &&
		len(b.Deletes) == 0 && len(b.DropQueues) == 0 && len(b.Meta) == 0
}

// Store persists durable state. All methods are safe for concurrent use.
type Store interface {
	// AllocMsgID returns a fresh message ID.
	AllocMsgID() MsgID
	// Apply applies b atomically. done (may be nil) is called exactly once,
	// when b is durable or has failed; it may run before Apply returns or
	// on another goroutine, and must not block. After a failure every
	// later Apply fails with the same error (errors are sticky).
	//
	// Apply must not block on I/O; it may be called with broker locks
	// held. The broker calls it under the locks that ordered the change in
	// memory (queue locks for entries, the vhost lock for definitions), so
	// batches reach the store in the order memory made them; it waits for
	// done, if at all, after releasing them. A store orders each batch
	// after every batch whose Apply returned before its Apply began: a
	// later batch may delete or overwrite what an earlier one wrote, and
	// recovery must see the effect of that order.
	//
	// A store does not keep b, its slices or their backing arrays after
	// Apply returns (what it keeps, it copies): the caller reuses them. The
	// messages b lists and the headers its entries point to are not the
	// batch's: they stay the caller's, immutable, and may be kept.
	Apply(b *Batch, done func(error))
	// ScanQueue calls fn for the entries of q with Seq >= from, in Seq
	// order, until fn returns false. The entries passed to fn must not be
	// modified.
	ScanQueue(q QueueID, from uint64, fn func(*Entry) bool) error
	// DeadlineRefs calls fn with the deadline and ref of every entry
	// whose deadline is in [from, until], in (deadline, queue, prio, seq)
	// order, until fn returns false; fn runs without the store's locks.
	// It reads no entry and no body: a disk store reads only its expiry
	// keys, so the cost follows the refs reported, not the queues' depth.
	// It may also report an entry deleted since the store last
	// checkpointed: a caller reads the entry (ReadEntries) before it acts.
	DeadlineRefs(from, until int64, fn func(deadline int64, r Ref) bool) error
	// LastSeq returns the highest Seq ever put for q, 0 if none. It
	// survives the deletion of all of q's entries and a restart, so a
	// recovered queue continues its sequence instead of reusing numbers
	// (state keyed by seq, such as expiry keys, may outlive an entry).
	// After DropQueues names q it may return 0: a dropped queue's id is
	// never used again.
	LastSeq(q QueueID) (uint64, error)
	// Queues calls fn for every queue that has stored entries or a
	// LastSeq, in QueueID order, until fn returns false. A queue named by
	// DropQueues is not listed (until entries are put in it again). fn
	// owns the QueueState it is given.
	Queues(fn func(QueueID, QueueState) bool) error
	// ReadEntries appends to dst up to max entries of priority level prio
	// of q with Seq >= from, in Seq order, and returns the extended slice.
	// It reads metadata only: no body is loaded. The next window starts
	// at the last returned Seq + 1; fewer than max entries means the level
	// has no more. max <= 0 reads nothing.
	ReadEntries(q QueueID, prio uint8, from uint64, max int, dst []EntryMeta) ([]EntryMeta, error)
	// ReadRefs appends to dst the stored entries refs name, as
	// ReadEntries reads them (metadata only), in the order of refs,
	// skipping a ref with no stored entry, and returns the extended
	// slice. It costs a point lookup per ref, not a range read: an
	// expiry of entries scattered through a deep queue reads only them.
	ReadRefs(refs []Ref, dst []EntryMeta) ([]EntryMeta, error)
	// LoadMessages reads the messages ids name, bodies included, and calls
	// fn(i, m) once for every index i of ids, in any order, after the
	// reads (fn may call the store). An id listed twice is read once and
	// both calls get the same *Message, which must not be modified. An id
	// that is not stored fails the whole call with an error matching
	// ErrUnknownMessage, before fn is called. A message whose stored data
	// is damaged is left out: fn is called for every other index, and
	// LoadMessages then returns a *DamageError naming the damaged ones.
	LoadMessages(ids []MsgID, fn func(i int, m *Message)) error
	// ScanMeta calls fn for every definition whose key starts with prefix,
	// in key order, until fn returns false.
	ScanMeta(prefix string, fn func(key string, value []byte) bool) error
	// Reserve waits until the store can take about n more bytes without
	// its pending writes (queued for the log, or applied but not yet
	// checkpointed) growing past their bound. Publishers call it before
	// they take any broker lock, so Apply itself never has to block. It
	// returns ctx's error if ctx ends first, or the store's sticky error;
	// a caller that goes on anyway just writes without the wait.
	Reserve(ctx context.Context, n int) error
	// Close releases the store. It is idempotent; calls after Close return
	// ErrClosed.
	Close() error
}

// ErrClosed is returned by every Store method called after Close.
var ErrClosed = errors.New("store: closed")

// ErrUnknownMessage is returned (wrapped) by LoadMessages for an id that is
// not stored: never put, or removed with its last entry (a store may still
// find such a message for a while: the disk store until its next
// checkpoint). A paging queue that loads a body for an entry another
// operation deleted meanwhile can get it; otherwise it means a broker bug.
var ErrUnknownMessage = errors.New("store: unknown message")

// ErrInvalidBatch is returned (through done) for a batch that refers to an
// unknown message or entry, or puts an entry that already exists. It means a
// broker bug, never bad client input.
var ErrInvalidBatch = errors.New("store: invalid batch")
