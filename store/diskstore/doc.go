// Package diskstore is the durable store.Store: a write-ahead log (wal),
// compressed body segments (segment) and a Pebble index (index), composed
// so that every store operation is one WAL record and a checkpoint moves
// what is still live into segments and the index in one batch.
//
// # Data path
//
//	Apply(batch) ──encode──▶ WAL record (one per batch; bodies of new messages inside)
//	      │                     │ group commit: one fsync per group
//	      │                     └──▶ done(nil) ──▶ publisher confirm
//	      └──▶ active overlay (in memory: the WAL since the last checkpoint, in LSN order)
//
//	checkpoint (background, every CheckpointBytes or CheckpointInterval):
//	  freeze active ─▶ WAL Sync ─▶ live new bodies → segment (fsync)
//	                  ─▶ one Pebble batch (entries, expiry keys, message records with
//	                     reference counts, definitions, queue and segment state,
//	                     checkpoint LSN), committed with Sync
//	                  ─▶ remove dead segments and WAL files ≤ checkpoint LSN
//
// A message published and acked within one checkpoint interval is written
// once (its WAL record) and never reaches a segment or the index. A body
// routed to several queues, or dead-lettered to several, is stored once:
// entries name their message by id, and the message record counts them.
//
// # Atomicity and recovery
//
// A batch is atomic because it is one WAL record with a CRC: after a crash
// at any instant the record is either whole (replayed) or torn (dropped
// with the WAL's tail). A dead-letter move (source delete + target puts)
// is therefore in exactly one place. A checkpoint is atomic because its
// index changes are one Pebble batch that also records the checkpoint
// LSN: recovery opens Pebble (the state as of the last committed
// checkpoint), removes segment files no committed checkpoint refers to,
// and replays the WAL records after the checkpoint LSN into the active
// overlay. Recovery time grows with the WAL (bounded by CheckpointBytes)
// and the number of segments, not with the number of stored messages.
//
// # Reads
//
// A read sees the active overlay over the frozen one (during a checkpoint)
// over an index snapshot taken at the same instant, so a concurrent
// checkpoint never hides or doubles an entry. Bodies come from an overlay
// when they are still there, else from their segment through the block
// cache.
//
// # Validation
//
// The disk store does not check that deletes and updates name existing
// entries (that would cost a read per ack): such a change is applied as a
// no-op and the checkpoint logs it. store.ErrInvalidBatch is never
// returned.
//
// # Layout of the data directory
//
//	DIR/wal/        WAL files (package wal)
//	DIR/segments/   segment files (package segment)
//	DIR/index/      the Pebble database (package index's keyspace)
package diskstore
