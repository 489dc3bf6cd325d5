package store

import "errors"

// QueueID identifies a queue for the store. The broker assigns it when a
// durable queue is first declared and keeps it in the queue's definition;
// it is never reused.
type QueueID uint64

// MsgID identifies a stored message. IDs are allocated by the store
// (AllocMsgID) and never reused within one store.
type MsgID uint64

// Ref names one entry: a position in one queue.
type Ref struct {
	Queue QueueID
	Seq   uint64
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
	// DeliveryCount is how many times the entry was returned to its queue
	// after a delivery (nack/reject with requeue, channel close, recover).
	DeliveryCount uint32
	// DeadLetter is non-empty while the entry waits in its queue's
	// dead-letter backlog (at-least-once dead-lettering found no route):
	// the reason it is being dead-lettered for. Such an entry is not
	// delivered; it is forwarded once a route exists.
	DeadLetter string
	// DeadAt is when that death happened (unix milliseconds), the time
	// x-death records when the entry is finally forwarded.
	DeadAt int64
}

// EffectiveHeader returns the entry's own header if it has one, else the
// message's.
func (e *Entry) EffectiveHeader() *Header {
	if e.Header != nil {
		return e.Header
	}
	return &e.Msg.Header
}

// Update sets the mutable fields of an existing entry.
type Update struct {
	Ref
	DeliveryCount uint32
	DeadLetter    string
	DeadAt        int64
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
	Apply(b *Batch, done func(error))
	// ScanQueue calls fn for the entries of q with Seq >= from, in Seq
	// order, until fn returns false. The entries passed to fn must not be
	// modified.
	ScanQueue(q QueueID, from uint64, fn func(*Entry) bool) error
	// ScanDeadlines calls fn for entries with 0 < Deadline <= until, in
	// (Deadline, Queue, Seq) order, until fn returns false.
	ScanDeadlines(until int64, fn func(*Entry) bool) error
	// ScanMeta calls fn for every definition whose key starts with prefix,
	// in key order, until fn returns false.
	ScanMeta(prefix string, fn func(key string, value []byte) bool) error
	// Close releases the store. It is idempotent; calls after Close return
	// ErrClosed.
	Close() error
}

// ErrClosed is returned by every Store method called after Close.
var ErrClosed = errors.New("store: closed")

// ErrInvalidBatch is returned (through done) for a batch that refers to an
// unknown message or entry, or puts an entry that already exists. It means a
// broker bug, never bad client input.
var ErrInvalidBatch = errors.New("store: invalid batch")
