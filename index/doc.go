// Package index defines the keys and values of brokerd's Pebble index, and
// the Pebble options the disk store opens it with.
//
// The index holds, as of the last checkpoint, every queued entry of a
// persistent message, the expiry schedule, message reference counts and
// locations, per-queue and per-segment state, the definitions (exchanges,
// queues, bindings, ...) and the store's own state. Bodies live in segment
// files; the index holds their encoded locations. This package only encodes
// and decodes; it does no I/O except through Options/Open.
//
// # Keyspace
//
// The first byte of every key names its kind. A kind's keys are contiguous
// and sorted bytewise, which for every kind equals the order of its numeric
// fields (big-endian fixed-width integers; deadlines with the sign bit
// flipped).
//
//	prefix  kind          key after the prefix           value
//	0x01    store state   (nothing)                      StoreState
//	0x02    definition    raw definition key bytes       opaque bytes
//	0x03    queue state   queue u64                      QueueState
//	0x04    segment       segment u32                    SegmentState
//	0x05    message       msg id u64                     MsgValue
//	0x06    entry         queue u64, prio u8, seq u64    EntryValue
//	0x07    expiry        deadline i64*, queue u64,      empty
//	                      prio u8, seq u64
//	0x08    group state   group u64                      GroupState
//
//	* stored as uint64(deadline) XOR 1<<63, big-endian
//
// Byte layouts (offsets in bytes; all integers big-endian):
//
//	entry key (18 bytes)
//	+------+-----------------+------+-----------------+
//	| 0x06 | queue           | prio | seq             |
//	+------+-----------------+------+-----------------+
//	0      1                 9      10                18
//
//	expiry key (26 bytes)
//	+------+-----------------+-----------------+------+-----------------+
//	| 0x07 | deadline^1<<63  | queue           | prio | seq             |
//	+------+-----------------+-----------------+------+-----------------+
//	0      1                 9                 17     18                26
//
//	message key (9)     queue state key (9)   segment key (5)   store state key (1)
//	+------+--------+   +------+--------+     +------+-----+    +------+
//	| 0x05 | msg id |   | 0x03 | queue  |     | 0x04 | seg |    | 0x01 |
//	+------+--------+   +------+--------+     +------+-----+    +------+
//	0      1        9   0      1        9     0      1     5
//
//	definition key (1 + n bytes)
//	+------+----------------------------+
//	| 0x02 | definition key, raw bytes  |
//	+------+----------------------------+
//
// Invariants the store relies on:
//
//   - All entries of a queue are contiguous (QueueBounds covers them and no
//     key of another queue); within a queue they sort by priority level,
//     ascending, then by seq, numerically (LevelBounds covers one level from
//     a seq). Reading the highest priority first means iterating levels
//     from 255 down, one LevelBounds at a time.
//   - Expiry keys sort by deadline, negative deadlines first, then by the
//     entry's (queue, prio, seq); ExpiryBounds takes a closed deadline
//     interval.
//   - Definition keys are stored unescaped: any bytes (NUL, 0xff, invalid
//     UTF-8) round-trip, they sort as the raw keys do, and a key that is a
//     prefix of another sorts first. A definition key is the last component
//     of its index key, so no terminator or escaping is needed;
//     MetaPrefixBounds gives exactly the keys with a given prefix.
//   - Every Bounds function returns [lower, upper): lower inclusive, upper
//     exclusive, ready for pebble.IterOptions and DeleteRange. Bounds are
//     newly allocated; keys are appended to the caller's dst, without
//     allocating when dst has the capacity (EntryKeyLen etc.).
//
// # Values
//
// Every value starts with a format byte: the high nibble names the kind of
// value, the low nibble its version, so a value read as the wrong kind is
// refused. Integers inside are uvarints (unsigned) or zigzag varints
// (signed, as encoding/binary's AppendVarint); byte strings are a uvarint
// length and then the bytes.
//
//	entry value, format 0x11 (version 1), 0x12 (version 2) or 0x13 (version 3)
//	+----------------+-------+----------------+--------------+- - - - - - - - - - -+
//	| 0x11/0x12/0x13 | flags | msg id uvarint | size uvarint | optional fields ... |
//	+----------------+-------+----------------+--------------+- - - - - - - - - - -+
//	0                1       2
//
//	optional fields, in this order, each present iff its flag bit is set:
//	  0x01  deadline        varint (unix ms)
//	  0x02  delivery count  uvarint
//	  0x04  dead-letter     bytes (the reason)
//	  0x08  dead-at         varint (unix ms)
//	  0x10  header          see below
//	  0x20  origin          see below; versions 2 and 3; always in version 2
//	  0x40  ready-at        varint (unix ms): not delivered before; version 3 only
//	  0x80  acquired count  uvarint; version 3 only
//	  (version 3 has at least one of 0x40 and 0x80)
//
//	header: exchange bytes, uvarint count, count × routing key bytes, props bytes
//	origin: queue bytes (non-empty), reason bytes, time varint (unix ms): the
//	        broker's record of where a dead-lettered copy came from
//
// Version 2 is written for an entry with an origin and only for it, so
// an entry without one keeps its version 1 encoding: a store that never
// held an origin stays readable by a build that knows version 1 only, and
// every value has exactly one encoding. Version 3 likewise is written for
// an entry with a ready-at time or an acquired count (an entry of a queue
// with delayed retry that came back) and only for it, whether or not it
// has an origin; every other entry keeps its version 1 or 2 encoding.
//
//	message value, format 0x21:        refs uvarint, size uvarint, location bytes
//	queue state, format 0x32:          last seq uvarint, uvarint n, n × level
//	  level:                           prio(1), count uvarint (> 0), bytes uvarint;
//	                                   levels ascend strictly by prio
//	queue state, format 0x31 (read):   last seq uvarint (no levels)
//	segment state, format 0x41:        live bytes varint, live msgs varint, total bytes varint
//	store state, format 0x51:          checkpoint lsn uvarint, next msg id uvarint
//
// An entry's optional fields are present exactly when their flag is set, and
// a flag is set exactly when the field is non-zero (the header: non-nil),
// so the common entry — no deadline, never delivered, not dead-lettered,
// own header — costs 2 bytes plus two varints.
//
// Every encoding is canonical: a decoder accepts exactly the bytes its
// encoder produces. It refuses unknown flags, a flagged field holding zero,
// non-minimal varints, integers out of their field's range, and trailing
// bytes. So decode followed by encode gives back the input, and a damaged
// value is an error rather than a plausible wrong value. Nil and empty byte
// strings encode alike and decode as nil.
//
// Decode errors are *DecodeError values saying what was decoded, at which
// byte offset and why; all match ErrCorrupt, and an unknown format version
// of the right kind also matches ErrUnknownVersion. Decoded byte slices
// alias the input (capacity capped, so appending to them cannot overwrite
// it); copy them before the input is reused, e.g. before a Pebble iterator
// moves.
//
// # Versions
//
// A value kind gains a field by getting a new format byte (0x12 for the
// entry value's second version, which added the origin; 0x13 for its
// third, which added the ready-at time and the acquired count): the encoder
// writes the newest (the entry value: the newest its fields need), the
// decoder accepts every version it has known. Decoders do not skip unknown trailing
// fields: a build that ignored a newer build's fields would silently drop
// them on its next write, so an older build refuses newer values with
// ErrUnknownVersion instead. Key layouts and prefix bytes never change; a
// new kind of key gets a new prefix byte.
//
// # Pebble
//
// Options gives the Pebble configuration for this workload and says why;
// Pebble's own WAL stays enabled. The package does not depend on any other
// package of brokerd.
//
// # Damage
//
// Pebble checks a checksum on every block it reads. Damage it finds (a
// *CorruptionError names the file, and what keys it holds) fails the read
// or compaction that met it and is logged; it never takes the process
// down (Pebble's default does, through Logger.Fatalf, so a broker serving
// from a damaged index exited at the first read of the block, and again
// after every restart). Verify reads every block of every live sstable,
// on an index opened read-only, before a store serves: a 1M-message index
// (35 MB, 4 tables, page cache warm) takes 28–32 ms. Damage in the index
// cannot be isolated: a block of an LSM table may hold the newest version
// of any of its keys (a tombstone of an acked message, a queue's counters,
// a segment's live count), so reading around it would bring back acked
// messages or drop live segments. A store with a damaged index refuses to
// open; the operator restores the data directory from a backup.
package index
