package index

import (
	"bytes"
	"encoding/binary"
	"math"
)

// Key prefixes: the first byte of every key names its kind. Each kind owns
// the half-open byte range [prefix, prefix+1), so a kind's keys are
// contiguous and no prefix is 0xff (the successor of every prefix exists).
const (
	prefixState      byte = 0x01 // on-disk format; never renumber
	prefixMeta       byte = 0x02 // on-disk format; never renumber
	prefixQueueState byte = 0x03 // on-disk format; never renumber
	prefixSegment    byte = 0x04 // on-disk format; never renumber
	prefixMsg        byte = 0x05 // on-disk format; never renumber
	prefixEntry      byte = 0x06 // on-disk format; never renumber
	prefixExpiry     byte = 0x07 // on-disk format; never renumber
	prefixGroupState byte = 0x08 // on-disk format; never renumber
)

// Key lengths, prefix byte included.
const (
	EntryKeyLen      = 1 + 8 + 1 + 8     // prefix, queue, prio, seq
	ExpiryKeyLen     = 1 + 8 + 8 + 1 + 8 // prefix, deadline, queue, prio, seq
	MsgKeyLen        = 1 + 8             // prefix, msg id
	QueueStateKeyLen = 1 + 8             // prefix, queue id
	SegmentKeyLen    = 1 + 4             // prefix, segment id
	GroupStateKeyLen = 1 + 8             // prefix, group id
)

// deadlineBias flips the sign bit so that big-endian byte order of the
// biased value equals numeric order of the signed deadline.
const deadlineBias = 1 << 63

// ---- Entries ----

// EntryKey appends the key of the entry (q, prio, seq) to dst and returns the
// extended slice. It does not allocate when dst has EntryKeyLen bytes of
// spare capacity.
func EntryKey(dst []byte, q uint64, prio uint8, seq uint64) []byte {
	dst = append(dst, prefixEntry)
	dst = binary.BigEndian.AppendUint64(dst, q)
	dst = append(dst, prio)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// DecodeEntryKey parses a key made by EntryKey. It returns an error matching
// ErrCorrupt if k is not exactly such a key.
func DecodeEntryKey(k []byte) (q uint64, prio uint8, seq uint64, err error) {
	if err := checkKey(k, prefixEntry, EntryKeyLen, "entry key"); err != nil {
		return 0, 0, 0, err
	}
	return binary.BigEndian.Uint64(k[1:]), k[9], binary.BigEndian.Uint64(k[10:]), nil
}

// QueueBounds returns the key range [lower, upper) holding every entry of
// queue q, all priority levels, in the form pebble.IterOptions and
// DeleteRange take. The range holds no key of any other queue.
func QueueBounds(q uint64) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint64(make([]byte, 1, 9), q)
	lower[0] = prefixEntry
	return lower, successor(lower)
}

// LevelBounds returns the key range [lower, upper) holding the entries of
// priority level prio of queue q whose seq is >= fromSeq, in seq order.
func LevelBounds(q uint64, prio uint8, fromSeq uint64) (lower, upper []byte) {
	lower = EntryKey(make([]byte, 0, EntryKeyLen), q, prio, fromSeq)
	return lower, successor(lower[:10])
}

// ---- Expiry ----

// ExpiryKey appends the expiry key of entry (q, prio, seq) with deadline
// (unix ms) to dst and returns the extended slice. Keys sort by deadline
// (negative deadlines first), then queue, prio, seq. It does not allocate
// when dst has ExpiryKeyLen bytes of spare capacity.
func ExpiryKey(dst []byte, deadline int64, q uint64, prio uint8, seq uint64) []byte {
	dst = append(dst, prefixExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(deadline)^deadlineBias)
	dst = binary.BigEndian.AppendUint64(dst, q)
	dst = append(dst, prio)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// DecodeExpiryKey parses a key made by ExpiryKey. It returns an error
// matching ErrCorrupt if k is not exactly such a key.
func DecodeExpiryKey(k []byte) (deadline int64, q uint64, prio uint8, seq uint64, err error) {
	if err := checkKey(k, prefixExpiry, ExpiryKeyLen, "expiry key"); err != nil {
		return 0, 0, 0, 0, err
	}
	deadline = int64(binary.BigEndian.Uint64(k[1:]) ^ deadlineBias)
	return deadline, binary.BigEndian.Uint64(k[9:]), k[17], binary.BigEndian.Uint64(k[18:]), nil
}

// ExpiryBounds returns the key range [lower, upper) holding the expiry keys
// whose deadline is in the closed interval [from, until]. If from > until
// the range is empty (lower == upper).
func ExpiryBounds(from, until int64) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint64(make([]byte, 1, 9), uint64(from)^deadlineBias)
	lower[0] = prefixExpiry
	if from > until {
		return lower, lower
	}
	upper = binary.BigEndian.AppendUint64(make([]byte, 1, 9), uint64(until)^deadlineBias)
	upper[0] = prefixExpiry
	return lower, successor(upper)
}

// ---- Messages ----

// MsgKey appends the key of message id to dst and returns the extended slice.
func MsgKey(dst []byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, prefixMsg), id)
}

// DecodeMsgKey parses a key made by MsgKey. It returns an error matching
// ErrCorrupt if k is not exactly such a key.
func DecodeMsgKey(k []byte) (uint64, error) {
	if err := checkKey(k, prefixMsg, MsgKeyLen, "message key"); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// ---- Queue state ----

// QueueStateKey appends the key of queue q's state to dst and returns the
// extended slice.
func QueueStateKey(dst []byte, q uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, prefixQueueState), q)
}

// DecodeQueueStateKey parses a key made by QueueStateKey. It returns an
// error matching ErrCorrupt if k is not exactly such a key.
func DecodeQueueStateKey(k []byte) (uint64, error) {
	if err := checkKey(k, prefixQueueState, QueueStateKeyLen, "queue state key"); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// QueueStateBounds returns the key range [lower, upper) holding every queue
// state key, in queue id order.
func QueueStateBounds() (lower, upper []byte) {
	return []byte{prefixQueueState}, []byte{prefixQueueState + 1}
}

// ---- Segments ----

// SegmentKey appends the key of segment seg's accounting to dst and returns
// the extended slice.
func SegmentKey(dst []byte, seg uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, prefixSegment), seg)
}

// DecodeSegmentKey parses a key made by SegmentKey. It returns an error
// matching ErrCorrupt if k is not exactly such a key.
func DecodeSegmentKey(k []byte) (uint32, error) {
	if err := checkKey(k, prefixSegment, SegmentKeyLen, "segment key"); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(k[1:]), nil
}

// SegmentBounds returns the key range [lower, upper) holding every segment
// key, in segment id order.
func SegmentBounds() (lower, upper []byte) {
	return []byte{prefixSegment}, []byte{prefixSegment + 1}
}

// GroupStateKey appends the key of replication group g's state
// (GroupState) to dst and returns the extended slice.
func GroupStateKey(dst []byte, g uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, prefixGroupState), g)
}

// DecodeGroupStateKey parses a key made by GroupStateKey. It returns an
// error matching ErrCorrupt if k is not exactly such a key.
func DecodeGroupStateKey(k []byte) (uint64, error) {
	if err := checkKey(k, prefixGroupState, GroupStateKeyLen, "group state key"); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// ---- Definitions ----

// MetaKey appends the meta key for the opaque definition key to dst and
// returns the extended slice. key is copied as raw bytes (any bytes,
// including NUL, 0xff and invalid UTF-8), so meta keys sort as their
// definition keys do, and a key that is a prefix of another sorts first.
func MetaKey(dst []byte, key []byte) []byte {
	return append(append(dst, prefixMeta), key...)
}

// DecodeMetaKey returns the definition key of a meta key made by MetaKey.
// The result aliases k. It returns an error matching ErrCorrupt if k is not
// a meta key.
func DecodeMetaKey(k []byte) ([]byte, error) {
	if len(k) == 0 || k[0] != prefixMeta {
		return nil, keyError("meta key", k, prefixMeta)
	}
	return k[1:], nil
}

// MetaPrefixBounds returns the key range [lower, upper) holding exactly the
// meta keys whose definition key starts with prefix. The empty prefix gives
// every meta key; a prefix of 0xff bytes is handled (its upper bound is the
// first key past the meta range, not a longer 0xff run).
func MetaPrefixBounds(prefix []byte) (lower, upper []byte) {
	lower = MetaKey(make([]byte, 0, 1+len(prefix)), prefix)
	return lower, successor(lower)
}

// ---- Store state ----

// StateKey returns the key of the store's own state (StoreState). The
// caller may modify the returned slice.
func StateKey() []byte {
	return []byte{prefixState}
}

// ---- helpers ----

// successor returns the smallest key greater than every key having k as a
// prefix: k with its trailing 0xff bytes dropped and the last remaining byte
// incremented. k always starts with a prefix byte < 0xff, so the result
// exists. The result never aliases k.
func successor(k []byte) []byte {
	i := len(k) - 1
	for i >= 0 && k[i] == math.MaxUint8 {
		i--
	}
	s := bytes.Clone(k[:i+1])
	s[i]++
	return s
}

func checkKey(k []byte, prefix byte, n int, what string) error {
	if len(k) != n || k[0] != prefix {
		return keyError(what, k, prefix)
	}
	return nil
}

func keyError(what string, k []byte, prefix byte) error {
	switch {
	case len(k) == 0:
		return corrupt(what, 0, "empty key")
	case k[0] != prefix:
		return corruptf(what, 0, "prefix byte %#02x, want %#02x", k[0], prefix)
	default:
		return corruptf(what, len(k), "key length %d, want %d", len(k), keyLen(prefix))
	}
}

func keyLen(prefix byte) int {
	switch prefix {
	case prefixEntry:
		return EntryKeyLen
	case prefixExpiry:
		return ExpiryKeyLen
	case prefixMsg:
		return MsgKeyLen
	case prefixQueueState:
		return QueueStateKeyLen
	case prefixSegment:
		return SegmentKeyLen
	case prefixGroupState:
		return GroupStateKeyLen
	}
	return -1
}
