package index

import (
	"encoding/binary"
	"math"
	"slices"
)

// Format bytes: the first byte of every value. The high nibble names the
// kind of value and the low nibble its version, so no two kinds share a
// format byte and a value read as the wrong kind fails to decode.
const (
	formatEntryV1        byte = 0x11 // on-disk format; never renumber
	formatEntryV2        byte = 0x12 // on-disk format; never renumber
	formatEntryV3        byte = 0x13 // on-disk format; never renumber
	formatMsgV1          byte = 0x21 // on-disk format; never renumber
	formatQueueStateV1   byte = 0x31 // on-disk format; never renumber
	formatQueueStateV2   byte = 0x32 // on-disk format; never renumber
	formatSegmentStateV1 byte = 0x41 // on-disk format; never renumber
	formatStoreStateV1   byte = 0x51 // on-disk format; never renumber
	formatStoreStateV2   byte = 0x52 // on-disk format; never renumber
	formatGroupStateV1   byte = 0x61 // on-disk format; never renumber
)

// Entry value flags: which optional fields follow. A flag is set exactly
// when its field is non-zero (non-nil for the header), which keeps the
// encoding canonical.
const (
	entryHasDeadline      byte = 1 << 0 // on-disk format; never renumber
	entryHasDeliveryCount byte = 1 << 1 // on-disk format; never renumber
	entryHasDeadLetter    byte = 1 << 2 // on-disk format; never renumber
	entryHasDeadAt        byte = 1 << 3 // on-disk format; never renumber
	entryHasHeader        byte = 1 << 4 // on-disk format; never renumber
	entryHasOrigin        byte = 1 << 5 // on-disk format (version 2 and 3); never renumber
	entryHasReadyAt       byte = 1 << 6 // on-disk format (version 3 only); never renumber
	entryHasAcquiredCount byte = 1 << 7 // on-disk format (version 3 only); never renumber

	entryKnownFlagsV1 = entryHasDeadline | entryHasDeliveryCount | entryHasDeadLetter |
		entryHasDeadAt | entryHasHeader
	entryKnownFlagsV2 = entryKnownFlagsV1 | entryHasOrigin
	entryKnownFlagsV3 = entryKnownFlagsV2 | entryHasReadyAt | entryHasAcquiredCount
	// entryRetryFlags are the fields that make an entry version 3.
	entryRetryFlags = entryHasReadyAt | entryHasAcquiredCount
)

// Header is a header rewritten by dead-lettering, stored with the entry that
// uses it instead of the message's own header.
type Header struct {
	Exchange    []byte
	RoutingKeys [][]byte
	Props       []byte // raw AMQP content-header properties
}

// Origin is an entry's dead-letter record: the queue (by name) its message
// was dead-lettered from by the broker, why and when.
type Origin struct {
	Queue  []byte // never empty
	Reason []byte
	At     int64 // unix ms
}

// EntryValue is the value of an entry key: one message's place in a queue.
//
// Nil and empty byte slices encode alike and decode as nil; Header nil and
// non-nil are distinguished, and so are Origin nil and non-nil.
//
// Version 2 (format 0x12) is version 1 with the origin: it is written for
// an entry with an Origin and only then, so the entries of a store that
// never dead-lettered (and every entry written before origins existed)
// stay version 1, readable by builds that know no other, and each value
// still has one encoding. A build that knows version 1 only refuses a
// version 2 value with ErrUnknownVersion.
//
// Version 3 (format 0x13) is version 2 with ReadyAt and AcquiredCount, the
// origin optional: it is written for an entry with either non-zero and
// only then (an entry of a queue with delayed retry that came back), so
// every other entry keeps its version 1 or 2 encoding.
type EntryValue struct {
	Msg           uint64 // message id
	Size          uint32 // body size (feeds byte limits without loading bodies)
	Deadline      int64  // unix ms, 0 = none
	DeliveryCount uint32
	AcquiredCount uint32  // returns for any reason, where kept apart (version 3)
	ReadyAt       int64   // unix ms, 0 = ready: not delivered before (version 3)
	DeadLetter    []byte  // non-empty: waiting in the dead-letter backlog, the reason
	DeadAt        int64   // unix ms
	Header        *Header // nil: the message's own header applies
	Origin        *Origin // nil: none (version 1)
}

// AppendEntryValue appends the encoding of v to dst and returns the extended
// slice. It allocates only if dst lacks the capacity.
func AppendEntryValue(dst []byte, v *EntryValue) []byte {
	n := 2 + 2*binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + // format, flags, fixed fields, dc
		binary.MaxVarintLen64 + binary.MaxVarintLen32 + len(v.DeadLetter) // dead at, reason
	var flags byte
	if v.Deadline != 0 {
		flags |= entryHasDeadline
	}
	if v.DeliveryCount != 0 {
		flags |= entryHasDeliveryCount
	}
	if len(v.DeadLetter) != 0 {
		flags |= entryHasDeadLetter
	}
	if v.DeadAt != 0 {
		flags |= entryHasDeadAt
	}
	if h := v.Header; h != nil {
		flags |= entryHasHeader
		n += 3*binary.MaxVarintLen32 + len(h.Exchange) + len(h.Props)
		for _, rk := range h.RoutingKeys {
			n += binary.MaxVarintLen32 + len(rk)
		}
	}
	format := formatEntryV1
	if o := v.Origin; o != nil {
		flags |= entryHasOrigin
		format = formatEntryV2
		n += 2*binary.MaxVarintLen32 + binary.MaxVarintLen64 + len(o.Queue) + len(o.Reason)
	}
	if v.ReadyAt != 0 {
		flags |= entryHasReadyAt
	}
	if v.AcquiredCount != 0 {
		flags |= entryHasAcquiredCount
	}
	if flags&entryRetryFlags != 0 {
		format = formatEntryV3
		n += binary.MaxVarintLen64 + binary.MaxVarintLen32
	}
	dst = slices.Grow(dst, n)

	dst = append(dst, format, flags)
	dst = binary.AppendUvarint(dst, v.Msg)
	dst = binary.AppendUvarint(dst, uint64(v.Size))
	if flags&entryHasDeadline != 0 {
		dst = binary.AppendVarint(dst, v.Deadline)
	}
	if flags&entryHasDeliveryCount != 0 {
		dst = binary.AppendUvarint(dst, uint64(v.DeliveryCount))
	}
	if flags&entryHasDeadLetter != 0 {
		dst = appendBytes(dst, v.DeadLetter)
	}
	if flags&entryHasDeadAt != 0 {
		dst = binary.AppendVarint(dst, v.DeadAt)
	}
	if h := v.Header; h != nil {
		dst = appendBytes(dst, h.Exchange)
		dst = binary.AppendUvarint(dst, uint64(len(h.RoutingKeys)))
		for _, rk := range h.RoutingKeys {
			dst = appendBytes(dst, rk)
		}
		dst = appendBytes(dst, h.Props)
	}
	if o := v.Origin; o != nil {
		dst = appendBytes(dst, o.Queue)
		dst = appendBytes(dst, o.Reason)
		dst = binary.AppendVarint(dst, o.At)
	}
	if flags&entryHasReadyAt != 0 {
		dst = binary.AppendVarint(dst, v.ReadyAt)
	}
	if flags&entryHasAcquiredCount != 0 {
		dst = binary.AppendUvarint(dst, uint64(v.AcquiredCount))
	}
	return dst
}

// DecodeEntryValue decodes b, of any version, into v, overwriting every
// field of v. v's byte slices (DeadLetter, the Header's and the Origin's)
// alias b: copy them if b is about to be reused, as a Pebble iterator's
// value is on the next step. A non-nil Header and its RoutingKeys, and a
// non-nil Origin, are newly allocated (the only allocations; an entry
// without either decodes without allocating). On error v is unspecified
// and the error matches ErrCorrupt.
func DecodeEntryValue(b []byte, v *EntryValue) error {
	d := decoder{b: b, what: "entry value"}
	known := entryKnownFlagsV1
	switch {
	case len(b) > 0 && b[0] == formatEntryV2:
		d.format(formatEntryV2)
		known = entryKnownFlagsV2
	case len(b) > 0 && b[0] == formatEntryV3:
		d.format(formatEntryV3)
		known = entryKnownFlagsV3
	default:
		d.format(formatEntryV1)
	}
	flags := d.byte("flags")
	switch {
	case d.err != nil:
	case flags&^known != 0:
		d.off--
		d.failf("unknown flags %#02x", flags&^known)
	case known == entryKnownFlagsV2 && flags&entryHasOrigin == 0:
		d.off--
		d.fail("version 2 without an origin")
	case known == entryKnownFlagsV3 && flags&entryRetryFlags == 0:
		d.off--
		d.fail("version 3 without a ready-at time or an acquired count")
	}
	*v = EntryValue{}
	v.Msg = d.uvarint("message id")
	v.Size = d.uint32("size")
	if flags&entryHasDeadline != 0 {
		v.Deadline = d.flaggedVarint("deadline")
	}
	if flags&entryHasDeliveryCount != 0 {
		v.DeliveryCount = d.flaggedUint32("delivery count")
	}
	if flags&entryHasDeadLetter != 0 {
		v.DeadLetter = d.flaggedBytes("dead-letter reason")
	}
	if flags&entryHasDeadAt != 0 {
		v.DeadAt = d.flaggedVarint("dead-at time")
	}
	if flags&entryHasHeader != 0 && d.err == nil {
		h := &Header{}
		h.Exchange = d.bytes("exchange")
		// Each routing key takes at least its length byte, which bounds
		// the allocation a corrupt count can cause.
		if n := d.uvarint("routing key count"); n > 0 && d.err == nil {
			if n > uint64(len(d.b)-d.off) {
				d.failf("routing key count %d exceeds the %d bytes left", n, len(d.b)-d.off)
			} else {
				h.RoutingKeys = make([][]byte, n)
				for i := range h.RoutingKeys {
					h.RoutingKeys[i] = d.bytes("routing key")
				}
			}
		}
		h.Props = d.bytes("properties")
		v.Header = h
	}
	if flags&entryHasOrigin != 0 && d.err == nil {
		o := &Origin{}
		o.Queue = d.flaggedBytes("origin queue")
		o.Reason = d.bytes("origin reason")
		o.At = d.varint("origin time")
		v.Origin = o
	}
	if flags&entryHasReadyAt != 0 {
		v.ReadyAt = d.flaggedVarint("ready-at time")
	}
	if flags&entryHasAcquiredCount != 0 {
		v.AcquiredCount = d.flaggedUint32("acquired count")
	}
	return d.finish()
}

// MsgValue is the value of a message key: where the message's blob is and
// how many entries refer to it.
type MsgValue struct {
	Refs uint32 // entries referring to the message
	Size uint32 // body size
	Loc  []byte // the segment package's encoded location; opaque here
}

// AppendMsgValue appends the encoding of v to dst and returns the extended
// slice.
func AppendMsgValue(dst []byte, v *MsgValue) []byte {
	dst = slices.Grow(dst, 1+3*binary.MaxVarintLen32+len(v.Loc))
	dst = append(dst, formatMsgV1)
	dst = binary.AppendUvarint(dst, uint64(v.Refs))
	dst = binary.AppendUvarint(dst, uint64(v.Size))
	return appendBytes(dst, v.Loc)
}

// DecodeMsgValue decodes b into v, overwriting every field. v.Loc aliases b.
func DecodeMsgValue(b []byte, v *MsgValue) error {
	d := decoder{b: b, what: "message value"}
	d.format(formatMsgV1)
	v.Refs = d.uint32("refs")
	v.Size = d.uint32("size")
	v.Loc = d.bytes("location")
	return d.finish()
}

// QueueState is the value of a queue state key: what recovery reads per
// queue instead of its entries.
//
// Version 1 held LastSeq only; version 2 adds Levels. The encoder writes
// version 2; the decoder reads both (a version 1 value has no Levels).
// Extending it again: add the field, add formatQueueStateV3, make
// AppendQueueState write V3 and DecodeQueueState accept every earlier
// version (new field zero). Decoders reject trailing bytes rather than skip
// them: an older build that ignored a newer build's fields would drop them
// on its next write, so it refuses (ErrUnknownVersion) instead.
type QueueState struct {
	LastSeq uint64 // the last seq assigned in the queue, over all levels
	// Levels are the queue's non-empty priority levels in ascending Prio
	// order, each with Count > 0. AppendQueueState requires this (it
	// encodes what it is given) and DecodeQueueState enforces it.
	Levels []LevelState
}

// LevelState counts the entries one priority level of a queue holds.
type LevelState struct {
	Prio  uint8
	Count uint64 // entries, > 0
	Bytes uint64 // sum of their body sizes
}

// QueueStateHasLevels reports whether b, an encoded queue state, carries
// level counters: false for version 1, whose writer kept LastSeq only, so a
// store opening it must count that queue's entries once.
func QueueStateHasLevels(b []byte) bool {
	return len(b) == 0 || b[0] != formatQueueStateV1
}

// levelMinLen is the shortest encoded level: prio byte and two one-byte
// uvarints. It bounds the allocation a corrupt level count can cause.
const levelMinLen = 3

// AppendQueueState appends the encoding of v to dst and returns the extended
// slice.
func AppendQueueState(dst []byte, v *QueueState) []byte {
	dst = slices.Grow(dst, 1+2*binary.MaxVarintLen64+len(v.Levels)*(1+2*binary.MaxVarintLen64))
	dst = append(dst, formatQueueStateV2)
	dst = binary.AppendUvarint(dst, v.LastSeq)
	dst = binary.AppendUvarint(dst, uint64(len(v.Levels)))
	for _, l := range v.Levels {
		dst = append(dst, l.Prio)
		dst = binary.AppendUvarint(dst, l.Count)
		dst = binary.AppendUvarint(dst, l.Bytes)
	}
	return dst
}

// DecodeQueueState decodes b into v, overwriting every field. A version 2
// value's Levels are newly allocated (nil when it has none); v's old Levels
// slice is not reused.
func DecodeQueueState(b []byte, v *QueueState) error {
	d := decoder{b: b, what: "queue state"}
	*v = QueueState{}
	if len(b) > 0 && b[0] == formatQueueStateV1 {
		d.format(formatQueueStateV1)
		v.LastSeq = d.uvarint("last seq")
		return d.finish()
	}
	d.format(formatQueueStateV2)
	v.LastSeq = d.uvarint("last seq")
	start := d.off
	n := d.uvarint("level count")
	if left := len(d.b) - d.off; d.err == nil && n > 0 {
		switch {
		case n > 256:
			d.off = start
			d.failf("level count %d exceeds 256", n)
		case n > uint64(left/levelMinLen):
			d.off = start
			d.failf("level count %d exceeds the %d bytes left", n, left)
		default:
			v.Levels = make([]LevelState, n)
		}
	}
	for i := range v.Levels {
		at := d.off
		l := &v.Levels[i]
		l.Prio = d.byte("level priority")
		if i > 0 && d.err == nil && l.Prio <= v.Levels[i-1].Prio {
			d.off = at
			d.failf("level priority %d after %d: levels must ascend", l.Prio, v.Levels[i-1].Prio)
		}
		at = d.off
		l.Count = d.uvarint("level count of entries")
		if d.err == nil && l.Count == 0 {
			d.off = at
			d.failf("level %d holds no entries", l.Prio)
		}
		l.Bytes = d.uvarint("level bytes")
	}
	if d.err != nil {
		v.Levels = nil
	}
	return d.finish()
}

// SegmentState is the value of a segment key: the live accounting that
// drives segment garbage collection. The fields are signed so that
// accounting applied out of order can pass through negative values and
// still round-trip.
type SegmentState struct {
	LiveBytes  int64
	LiveMsgs   int64
	TotalBytes int64
}

// AppendSegmentState appends the encoding of v to dst and returns the
// extended slice.
func AppendSegmentState(dst []byte, v *SegmentState) []byte {
	dst = append(dst, formatSegmentStateV1)
	dst = binary.AppendVarint(dst, v.LiveBytes)
	dst = binary.AppendVarint(dst, v.LiveMsgs)
	return binary.AppendVarint(dst, v.TotalBytes)
}

// DecodeSegmentState decodes b into v, overwriting every field.
func DecodeSegmentState(b []byte, v *SegmentState) error {
	d := decoder{b: b, what: "segment state"}
	d.format(formatSegmentStateV1)
	v.LiveBytes = d.varint("live bytes")
	v.LiveMsgs = d.varint("live messages")
	v.TotalBytes = d.varint("total bytes")
	return d.finish()
}

// StoreState is the value of StateKey: the store's own state as of the last
// checkpoint.
type StoreState struct {
	CheckpointLSN uint64 // WAL position the index reflects
	NextMsgID     uint64 // the highest message id given out
	// Position is a replicated store's own count of the changes its
	// overlays applied, as of the checkpoint (its records are not all in
	// the WAL, so an LSN cannot say it); 0 in a single node's store, whose
	// state is then written in version 1.
	Position uint64
}

// AppendStoreState appends the encoding of v to dst and returns the extended
// slice.
func AppendStoreState(dst []byte, v *StoreState) []byte {
	if v.Position == 0 {
		dst = append(dst, formatStoreStateV1)
		dst = binary.AppendUvarint(dst, v.CheckpointLSN)
		return binary.AppendUvarint(dst, v.NextMsgID)
	}
	dst = append(dst, formatStoreStateV2)
	dst = binary.AppendUvarint(dst, v.CheckpointLSN)
	dst = binary.AppendUvarint(dst, v.NextMsgID)
	return binary.AppendUvarint(dst, v.Position)
}

// DecodeStoreState decodes b into v, overwriting every field.
func DecodeStoreState(b []byte, v *StoreState) error {
	d := decoder{b: b, what: "store state"}
	v2 := len(b) > 0 && b[0] == formatStoreStateV2
	if v2 {
		d.format(formatStoreStateV2)
	} else {
		d.format(formatStoreStateV1)
	}
	v.CheckpointLSN = d.uvarint("checkpoint lsn")
	v.NextMsgID = d.uvarint("next message id")
	v.Position = 0
	if v2 {
		v.Position = d.uvarint("position")
		d.nonZero(0, v.Position == 0, "position")
	}
	return d.finish()
}

// GroupState is the value of GroupStateKey: a replication group's state
// as the index holds it, written by each checkpoint of a replicated
// store. Applied is the last Raft entry whose changes the index holds
// (AppliedTerm its term); the group's log may drop the entries up to
// Compacted (CompactedTerm its term) — every member that needed them has
// them. ConfState is the membership as of Applied, etcd raft's
// raftpb.ConfState encoding, opaque here.
type GroupState struct {
	Applied, AppliedTerm     uint64
	Compacted, CompactedTerm uint64
	ConfState                []byte
}

// AppendGroupState appends the encoding of v to dst and returns the
// extended slice.
func AppendGroupState(dst []byte, v *GroupState) []byte {
	dst = append(dst, formatGroupStateV1)
	dst = binary.AppendUvarint(dst, v.Applied)
	dst = binary.AppendUvarint(dst, v.AppliedTerm)
	dst = binary.AppendUvarint(dst, v.Compacted)
	dst = binary.AppendUvarint(dst, v.CompactedTerm)
	return appendBytes(dst, v.ConfState)
}

// DecodeGroupState decodes b into v, overwriting every field. ConfState
// aliases b.
func DecodeGroupState(b []byte, v *GroupState) error {
	d := decoder{b: b, what: "group state"}
	d.format(formatGroupStateV1)
	v.Applied = d.uvarint("applied")
	v.AppliedTerm = d.uvarint("applied term")
	v.Compacted = d.uvarint("compacted")
	v.CompactedTerm = d.uvarint("compacted term")
	v.ConfState = d.bytes("conf state")
	if d.err == nil && v.Compacted > v.Applied {
		d.failf("compacted index %d above the applied %d", v.Compacted, v.Applied)
	}
	return d.finish()
}

// appendBytes appends a uvarint length and then p.
func appendBytes(dst, p []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(p))), p...)
}

// decoder reads one value. After the first failure every read returns zero
// and d.err keeps that failure, so callers check once, at finish.
type decoder struct {
	b    []byte
	off  int
	what string
	err  error
}

func (d *decoder) fail(reason string) {
	if d.err == nil {
		d.setErr(corrupt(d.what, d.off, reason))
	}
}

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.setErr(corruptf(d.what, d.off, format, args...))
	}
}

// setErr records the first failure and empties the input, so that every
// later read fails without checking d.err first.
func (d *decoder) setErr(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b, d.off = nil, 0
}

// format checks the format byte.
func (d *decoder) format(want byte) {
	switch {
	case len(d.b) == 0:
		d.fail("empty value")
	case d.b[0] == want:
		d.off = 1
	case d.b[0]>>4 == want>>4:
		d.setErr(&DecodeError{What: d.what, Offset: 0, Err: ErrUnknownVersion,
			Reason: "format byte " + hexByte(d.b[0]) + " is a version this build does not read (it reads " + hexByte(want) + ")"})
	default:
		d.fail("format byte " + hexByte(d.b[0]) + ", want " + hexByte(want))
	}
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated " + field)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// uvarint reads a minimally encoded uvarint: a longer encoding of the same
// number is rejected so that every value has exactly one encoding. The
// one-byte case (most fields) is inlined.
func (d *decoder) uvarint(field string) uint64 {
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		c := d.b[d.off]
		d.off++
		return uint64(c)
	}
	return d.uvarintSlow(field)
}

func (d *decoder) uvarintSlow(field string) uint64 {
	if d.err != nil {
		return 0
	}
	var x uint64
	var s uint
	for i, c := range d.b[d.off:] {
		if i == binary.MaxVarintLen64-1 && c > 1 {
			d.fail(field + " overflows 64 bits")
			return 0
		}
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.fail(field + " is not minimally encoded")
				return 0
			}
			d.off += i + 1
			return x | uint64(c)<<s
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	d.fail("truncated " + field)
	return 0
}

// varint reads a zigzag varint (binary.AppendVarint).
func (d *decoder) varint(field string) int64 {
	ux := d.uvarint(field)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) uint32(field string) uint32 {
	start := d.off
	x := d.uvarint(field)
	if x > math.MaxUint32 {
		d.off = start
		d.failf("%s %d overflows 32 bits", field, x)
		return 0
	}
	return uint32(x)
}

// bytes reads a length-prefixed byte string. The result aliases d.b, with
// its capacity capped so that appending to it cannot overwrite d.b. An empty
// string reads as nil.
func (d *decoder) bytes(field string) []byte {
	start := d.off
	n := d.uvarint(field + " length")
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.off = start
		d.failf("%s length %d exceeds the %d bytes left", field, n, len(d.b)-start)
		return nil
	}
	end := d.off + int(n)
	p := d.b[d.off:end:end]
	d.off = end
	return p
}

// The flagged readers read a field announced by a flag and fail if it holds
// its zero value, which the encoder never writes.

func (d *decoder) flaggedVarint(field string) int64 {
	start := d.off
	x := d.varint(field)
	d.nonZero(start, x == 0, field)
	return x
}

func (d *decoder) flaggedUint32(field string) uint32 {
	start := d.off
	x := d.uint32(field)
	d.nonZero(start, x == 0, field)
	return x
}

func (d *decoder) flaggedBytes(field string) []byte {
	start := d.off
	p := d.bytes(field)
	d.nonZero(start, len(p) == 0, field)
	return p
}

func (d *decoder) nonZero(start int, isZero bool, field string) {
	if isZero && d.err == nil {
		d.off = start
		d.fail(field + " flagged but zero")
	}
}

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.failf("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}

func hexByte(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{'0', 'x', digits[c>>4], digits[c&0xf]})
}
