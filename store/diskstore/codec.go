package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// Record and blob encodings. Both are self-contained: a WAL record names
// messages by id and queues by id, never by file position, so the log can
// be shipped elsewhere: a replication group's Raft entries carry records
// (version 3, "entry" kind; doc.go, "Record kinds").
//
// A WAL record is a version byte, then what the version says. Versions 1,
// 2 and 4 are one Batch:
//
//	record  = version(1) | msgs | puts | updates | deletes | drops | meta
//	msgs    = uvarint(n) { uvarint(id) flags(1) header bytes(body) }
//	puts    = uvarint(n) { ref uvarint(msg) varint(deadline) uvarint(dc)
//	                       bytes(deadLetter) varint(deadAt) hasHeader(1) [header]
//	                       [hasOrigin(1) [origin]]          versions 2 and 4
//	                       [varint(readyAt) uvarint(ac)] }  version 4 only
//	updates = uvarint(n) { ref uvarint(dc) bytes(deadLetter) varint(deadAt)
//	                       [varint(readyAt) uvarint(ac)] }  version 4 only
//	deletes = uvarint(n) { ref }
//	drops   = uvarint(n) { uvarint(queue) }
//	meta    = uvarint(n) { bytes(key) op(1) [bytes(value)] }   op: 1 put, 2 delete
//	ref     = uvarint(queue) prio(1) uvarint(seq)
//	header  = bytes(exchange) uvarint(n) { bytes(routing key) } bytes(props)
//	origin  = bytes(queue) bytes(reason) varint(at)
//	bytes   = uvarint(len) data
//
// A record is written as version 1 unless one of its puts carries an
// origin (store.Origin: a dead-lettered copy's record of where it came
// from), which needs version 2, or one of its puts or updates carries a
// ready-at time or an acquired count (ac; an entry of a queue with delayed
// retry that came back), which needs version 4 (version 2 with both fields
// on every put and update; version 3 is taken by kinds, below). Replay
// reads every version, so a WAL written before origins or retries existed
// replays as it did, and a batch without the new fields is written byte
// for byte as before.
//
// Version 3 is a kind byte, then the kind's body (the WAL records of
// replication, doc.go "Record kinds"):
//
//	record    = version(1)=3 | kind(1) | body
//	local     = batch                                                   kind 1
//	volatile  = batch                                                   kind 2
//	entry     = uvarint(group) uvarint(term) uvarint(index) type(1) bytes(data)   kind 3
//	hardstate = uvarint(group) uvarint(term) uvarint(vote) uvarint(commit)        kind 4
//	batch     = a version 1, 2 or 4 record, as above (its own version byte first)
//
// A version 1, 2 or 4 record is a local batch (or a volatile one, in a
// Volatile WAL record): Apply writes every batch that way, so a single
// node's records are byte for byte what they were before kinds existed,
// and version 3 appears only in records that need a kind. A local record
// is in a Durable WAL record, a volatile one in a Volatile WAL record,
// entries and hard states in Durable ones (walRecord.checkClass).
//
// A message blob, as the segment files hold it, is
//
//	blob = version(1)=1 | uvarint(id) flags(1) header bytes(body)
//
// flags bit 0: persistent.
const (
	recordVersion       = 1 // on-disk format; never renumber
	recordVersionOrigin = 2 // on-disk format; never renumber: puts carry hasOrigin
	recordVersionKind   = 3 // on-disk format; never renumber: a kind byte, then its body
	recordVersionRetry  = 4 // on-disk format; never renumber: puts and updates carry readyAt and ac
	blobVersion         = 1 // on-disk format; never renumber

	flagPersistent = 1 << 0 // on-disk format; never renumber

	metaPut    = 1 // on-disk format; never renumber
	metaDelete = 2 // on-disk format; never renumber
)

// The kinds of a version-3 record.
const (
	kindLocal     = 1 // on-disk format; never renumber: a batch applied at append
	kindVolatile  = 2 // on-disk format; never renumber: a batch of volatile queues
	kindEntry     = 3 // on-disk format; never renumber: a replication group's log entry
	kindHardState = 4 // on-disk format; never renumber: a replication group's HardState
)

// kindName names a record kind in errors and logs.
func kindName(kind byte) string {
	switch kind {
	case kindLocal:
		return "local"
	case kindVolatile:
		return "volatile"
	case kindEntry:
		return "entry"
	case kindHardState:
		return "hardstate"
	}
	return fmt.Sprintf("kind %d", kind)
}

// errCorrupt is wrapped by every decoding error: a record that passed the
// WAL's CRC but does not decode means a bug or a foreign file.
var errCorrupt = errors.New("diskstore: corrupt record")

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendHeader(dst []byte, h *store.Header) []byte {
	dst = appendString(dst, h.Exchange)
	dst = binary.AppendUvarint(dst, uint64(len(h.RoutingKeys)))
	for _, k := range h.RoutingKeys {
		dst = appendString(dst, k)
	}
	return appendBytes(dst, h.Props)
}

func appendRef(dst []byte, r store.Ref) []byte {
	dst = binary.AppendUvarint(dst, uint64(r.Queue))
	dst = append(dst, r.Prio)
	return binary.AppendUvarint(dst, r.Seq)
}

func appendMessage(dst []byte, m *store.Message) []byte {
	dst = binary.AppendUvarint(dst, uint64(m.ID))
	var f byte
	if m.Persistent {
		f |= flagPersistent
	}
	dst = append(dst, f)
	dst = appendHeader(dst, &m.Header)
	return appendBytes(dst, m.Body)
}

// encodeBlob is a message as a segment holds it.
func encodeBlob(dst []byte, m *store.Message) []byte {
	dst = append(dst, blobVersion)
	return appendMessage(dst, m)
}

// encodeRecord appends b's WAL record. Only the messages in msgs are
// written with their bodies (the caller drops those already stored).
func encodeRecord(dst []byte, b *store.Batch, msgs []*store.Message) []byte {
	version := recordVersionOf(b)
	retry := version == recordVersionRetry
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(msgs)))
	for _, m := range msgs {
		dst = appendMessage(dst, m)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Puts)))
	for i := range b.Puts {
		e := &b.Puts[i]
		dst = appendRef(dst, e.Ref)
		dst = binary.AppendUvarint(dst, uint64(e.Msg.ID))
		dst = binary.AppendVarint(dst, e.Deadline)
		dst = binary.AppendUvarint(dst, uint64(e.DeliveryCount))
		dst = appendString(dst, e.DeadLetter)
		dst = binary.AppendVarint(dst, e.DeadAt)
		if e.Header != nil {
			dst = append(dst, 1)
			dst = appendHeader(dst, e.Header)
		} else {
			dst = append(dst, 0)
		}
		if version != recordVersion {
			if o := e.Origin; o != nil {
				dst = append(dst, 1)
				dst = appendString(dst, o.Queue)
				dst = appendString(dst, o.Reason)
				dst = binary.AppendVarint(dst, o.At)
			} else {
				dst = append(dst, 0)
			}
		}
		if retry {
			dst = binary.AppendVarint(dst, e.ReadyAt)
			dst = binary.AppendUvarint(dst, uint64(e.AcquiredCount))
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Updates)))
	for i := range b.Updates {
		u := &b.Updates[i]
		dst = appendRef(dst, u.Ref)
		dst = binary.AppendUvarint(dst, uint64(u.DeliveryCount))
		dst = appendString(dst, u.DeadLetter)
		dst = binary.AppendVarint(dst, u.DeadAt)
		if retry {
			dst = binary.AppendVarint(dst, u.ReadyAt)
			dst = binary.AppendUvarint(dst, uint64(u.AcquiredCount))
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Deletes)))
	for _, r := range b.Deletes {
		dst = appendRef(dst, r)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.DropQueues)))
	for _, q := range b.DropQueues {
		dst = binary.AppendUvarint(dst, uint64(q))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Meta)))
	for _, op := range b.Meta {
		dst = appendString(dst, op.Key)
		if op.Value == nil {
			dst = append(dst, metaDelete)
		} else {
			dst = append(dst, metaPut)
			dst = appendBytes(dst, op.Value)
		}
	}
	return dst
}

// recordVersionOf is the version b's record is written in: the oldest
// that holds every field b uses.
func recordVersionOf(b *store.Batch) byte {
	version := byte(recordVersion)
	for i := range b.Puts {
		e := &b.Puts[i]
		if e.ReadyAt != 0 || e.AcquiredCount != 0 {
			return recordVersionRetry
		}
		if e.Origin != nil {
			version = recordVersionOrigin
		}
	}
	for i := range b.Updates {
		if u := &b.Updates[i]; u.ReadyAt != 0 || u.AcquiredCount != 0 {
			return recordVersionRetry
		}
	}
	return version
}

// encodeBatchRecord appends b's WAL record as a version-3 record of kind
// (kindLocal or kindVolatile): the version and kind bytes, then
// encodeRecord's. Apply does not use it (doc.go, "Record kinds").
func encodeBatchRecord(dst []byte, kind byte, b *store.Batch, msgs []*store.Message) []byte {
	dst = append(dst, recordVersionKind, kind)
	return encodeRecord(dst, b, msgs)
}

// encodeEntry appends e's WAL record.
func encodeEntry(dst []byte, e *LogEntry) []byte {
	dst = append(dst, recordVersionKind, kindEntry)
	dst = binary.AppendUvarint(dst, e.Group)
	dst = binary.AppendUvarint(dst, e.Term)
	dst = binary.AppendUvarint(dst, e.Index)
	dst = append(dst, e.Type)
	return appendBytes(dst, e.Data)
}

// encodeHardState appends hs's WAL record.
func encodeHardState(dst []byte, hs *HardState) []byte {
	dst = append(dst, recordVersionKind, kindHardState)
	dst = binary.AppendUvarint(dst, hs.Group)
	dst = binary.AppendUvarint(dst, hs.Term)
	dst = binary.AppendUvarint(dst, hs.Vote)
	return binary.AppendUvarint(dst, hs.Commit)
}

// originToIndex and originFromIndex convert an entry's origin to and from
// its index form (the index value's copy is made here: ev aliases what it
// was decoded from).
func originToIndex(o *store.Origin) *index.Origin {
	if o == nil {
		return nil
	}
	return &index.Origin{Queue: []byte(o.Queue), Reason: []byte(o.Reason), At: o.At}
}

func originFromIndex(o *index.Origin) *store.Origin {
	if o == nil {
		return nil
	}
	return &store.Origin{Queue: string(o.Queue), Reason: string(o.Reason), At: o.At}
}

// decoder reads the encodings above; the first error sticks and every
// later read returns zero values.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", errCorrupt, what, d.off)
	}
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail(what)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.off += n
	return v
}

// uint32 reads a uvarint that must fit in 32 bits.
func (d *decoder) uint32(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail(what + " overflows 32 bits")
		return 0
	}
	return uint32(v)
}

// count reads an element count, refusing one that cannot fit in the
// rest of the input (each element takes at least min bytes), so a
// corrupt count never makes a huge allocation.
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64((len(d.b)-d.off)/min) {
		d.fail(what + " count")
		return 0
	}
	return int(n)
}

// bytes returns a copy: decoded values outlive the buffer.
func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(what)
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b[d.off:])
	d.off += int(n)
	return v
}

func (d *decoder) string(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(what)
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func (d *decoder) header(h *store.Header) {
	h.Exchange = d.string("exchange")
	n := d.count("routing keys", 1)
	if n > 0 {
		h.RoutingKeys = make([]string, n)
		for i := range h.RoutingKeys {
			h.RoutingKeys[i] = d.string("routing key")
		}
	}
	h.Props = d.bytes("properties")
}

func (d *decoder) ref() store.Ref {
	q := d.uvarint("queue")
	p := d.byte1("priority")
	s := d.uvarint("seq")
	return store.Ref{Queue: store.QueueID(q), Prio: p, Seq: s}
}

func (d *decoder) message() *store.Message {
	m := &store.Message{ID: store.MsgID(d.uvarint("message id"))}
	f := d.byte1("message flags")
	m.Persistent = f&flagPersistent != 0
	d.header(&m.Header)
	m.Body = d.bytes("body")
	if m.Body == nil && d.err == nil {
		m.Body = []byte{}
	}
	return m
}

func (d *decoder) end(what string) error {
	if d.err == nil && d.off != len(d.b) {
		d.fail(what + ": trailing bytes")
	}
	return d.err
}

// decodeBlob decodes a segment blob.
func decodeBlob(b []byte) (*store.Message, error) {
	d := decoder{b: b}
	if v := d.byte1("blob version"); d.err == nil && v != blobVersion {
		d.fail(fmt.Sprintf("blob version %d", v))
	}
	m := d.message()
	if err := d.end("blob"); err != nil {
		return nil, err
	}
	m.Stored.Store(true)
	return m, nil
}

// walRecord is a decoded WAL record of any version: kind says which of
// its fields is set.
type walRecord struct {
	// kinded is set for a version-3 record: its kind is on disk, and
	// must agree with the WAL record's class.
	kinded    bool
	kind      byte         // kindLocal for a version 1, 2 or 4 record
	batch     *store.Batch // kindLocal, kindVolatile
	entry     LogEntry     // kindEntry
	hardState HardState    // kindHardState
}

// decodeWALRecord decodes a WAL record of any version. Decoded values are
// copies: they outlive rec. Every error wraps errCorrupt.
func decodeWALRecord(rec []byte) (walRecord, error) {
	d := decoder{b: rec}
	var r walRecord
	if len(rec) == 0 || rec[0] != recordVersionKind {
		r.kind = kindLocal
		r.batch = d.batch()
	} else {
		d.off = 1
		r.kinded = true
		r.kind = d.byte1("record kind")
		switch r.kind {
		case kindLocal, kindVolatile:
			r.batch = d.batch()
		case kindEntry:
			e := &r.entry
			e.Group = d.uvarint("group")
			e.Term = d.uvarint("term")
			e.Index = d.uvarint("index")
			e.Type = d.byte1("entry type")
			e.Data = d.bytes("entry data")
		case kindHardState:
			hs := &r.hardState
			hs.Group = d.uvarint("group")
			hs.Term = d.uvarint("term")
			hs.Vote = d.uvarint("vote")
			hs.Commit = d.uvarint("commit")
		default:
			d.fail(fmt.Sprintf("record kind %d", r.kind))
		}
	}
	if err := d.end(kindName(r.kind) + " record"); err != nil {
		return walRecord{}, err
	}
	return r, nil
}

// checkClass reports an error wrapping errCorrupt if r is a version-3
// record whose kind contradicts the class of the WAL record holding it: a
// volatile batch is a Volatile record, every other kind a Durable one. (A
// version 1, 2 or 4 record's class is what makes it local or volatile.)
func (r *walRecord) checkClass(class wal.Class) error {
	if !r.kinded || (r.kind == kindVolatile) == (class == wal.Volatile) {
		return nil
	}
	return fmt.Errorf("%w: a %s record in a %s WAL record", errCorrupt, kindName(r.kind), class)
}

// batch reads a version 1, 2 or 4 record. A put whose message is not in
// the record refers to one stored earlier: its Msg is a stub with only the
// id (Body nil).
func (d *decoder) batch() *store.Batch {
	version := d.byte1("record version")
	if d.err == nil && version != recordVersion && version != recordVersionOrigin && version != recordVersionRetry {
		d.fail(fmt.Sprintf("record version %d", version))
	}
	retry := version == recordVersionRetry
	b := &store.Batch{}
	if n := d.count("messages", 4); n > 0 {
		b.Messages = make([]*store.Message, n)
		for i := range b.Messages {
			b.Messages[i] = d.message()
			b.Messages[i].Stored.Store(true)
		}
	}
	byID := make(map[store.MsgID]*store.Message, len(b.Messages))
	for _, m := range b.Messages {
		byID[m.ID] = m
	}
	if n := d.count("puts", 9); n > 0 {
		b.Puts = make([]store.Entry, n)
		for i := range b.Puts {
			e := &b.Puts[i]
			e.Ref = d.ref()
			id := store.MsgID(d.uvarint("put message"))
			if e.Msg = byID[id]; e.Msg == nil {
				e.Msg = &store.Message{ID: id}
			}
			e.Deadline = d.varint("deadline")
			e.DeliveryCount = uint32(d.uvarint("delivery count"))
			e.DeadLetter = d.string("dead letter")
			e.DeadAt = d.varint("dead at")
			if d.byte1("has header") == 1 {
				e.Header = &store.Header{}
				d.header(e.Header)
			}
			if version != recordVersion && d.byte1("has origin") == 1 {
				e.Origin = &store.Origin{Queue: d.string("origin queue"), Reason: d.string("origin reason"), At: d.varint("origin time")}
			}
			if retry {
				e.ReadyAt = d.varint("ready at")
				e.AcquiredCount = d.uint32("acquired count")
			}
		}
	}
	if n := d.count("updates", 6); n > 0 {
		b.Updates = make([]store.Update, n)
		for i := range b.Updates {
			u := &b.Updates[i]
			u.Ref = d.ref()
			u.DeliveryCount = uint32(d.uvarint("delivery count"))
			u.DeadLetter = d.string("dead letter")
			u.DeadAt = d.varint("dead at")
			if retry {
				u.ReadyAt = d.varint("ready at")
				u.AcquiredCount = d.uint32("acquired count")
			}
		}
	}
	if n := d.count("deletes", 3); n > 0 {
		b.Deletes = make([]store.Ref, n)
		for i := range b.Deletes {
			b.Deletes[i] = d.ref()
		}
	}
	if n := d.count("drops", 1); n > 0 {
		b.DropQueues = make([]store.QueueID, n)
		for i := range b.DropQueues {
			b.DropQueues[i] = store.QueueID(d.uvarint("dropped queue"))
		}
	}
	if n := d.count("meta", 2); n > 0 {
		b.Meta = make([]store.MetaOp, n)
		for i := range b.Meta {
			op := &b.Meta[i]
			op.Key = d.string("meta key")
			switch d.byte1("meta op") {
			case metaPut:
				op.Value = d.bytes("meta value")
				if op.Value == nil && d.err == nil {
					op.Value = []byte{}
				}
			case metaDelete:
			default:
				d.fail("meta op")
			}
		}
	}
	return b
}
