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
// A batch that changes only volatile queues (store.VolatileQueue: paged-out
// transient messages) is a Volatile WAL record: no fsync is waited for,
// and recovery does not replay it — it reads it only for the message ids
// it used, which are never handed out again — nor what a replayed durable
// record changes in volatile queues. Checkpoints move volatile entries into
// the index like any other; the broker drops those queues at recovery.
//
// # Record kinds
//
// The WAL is also meant to hold the Raft logs of replication groups (one
// WAL, one fsync per group commit for every group), so a record has a
// kind (codec.go has the bytes; kinds are never renumbered):
//
//   - local: a store batch, applied to the active overlay when it is
//     appended and replayed at recovery — every record a single node
//     writes. Apply writes it as a record of version 1 or 2, as before
//     kinds existed (no byte more per record), or 4 when an entry carries
//     a retry's ready-at time or acquired count; a version-3 local record
//     replays the same way.
//   - volatile: a batch that changes only volatile queues, in a Volatile
//     WAL record; replay reads only its message ids, as above.
//   - entry(group, term, index, type, data): a Raft log entry of a
//     replication group; data is opaque to the store.
//   - hardstate(group, term, vote, commit): a group's Raft HardState.
//
// A version-3 record's kind must agree with its WAL class (volatile in a
// Volatile record, the others in Durable ones), or Open fails naming the
// LSN. The store writes no entry or hard state itself and does not apply
// them: Open hands those after the checkpoint LSN, in LSN order, to
// Options.ReplicaLog, interleaved with its replay of the batches. Without
// one (a single node), such a record makes Open fail with ErrNoReplicaLog,
// naming the LSN: a store must not skip replicated data it cannot apply.
//
// A group's log is rebuilt from its records by the receiver, with etcd
// raft's rule for entries written again after a leader change (logical
// suffix truncation): an entry(g, i) discards every entry of g with index
// ≥ i that an earlier record held; the last hardstate of g is its
// HardState.
//
// # Replicated mode
//
// With Options.Replication the store is the state machine of one Raft
// group (replicated.go; package cluster drives it), and its WAL is the
// group's log as well:
//
//	leader: Apply ──▶ active overlay (at once, as on a single node)
//	          └──▶ the open proposal (the batch's record, length-prefixed)
//	        TakeProposals ──▶ one Raft entry per proposal ──▶ AppendReplica: entry records
//	        Committed(index) ──▶ the proposal's dones (a confirm is a majority's fsync)
//	follower: AppendReplica ──▶ entry records;  ApplyEntry(committed) ──▶ active overlay
//
// The leader's overlay runs ahead of the log, as a single node's runs
// ahead of the fsync, so a checkpoint freezes at a proposal's end and waits
// until every proposal in the frozen overlay is committed before it writes
// anything: the index never holds a change the group did not commit. Its
// one index batch also writes the group's state (index key 0x08:
// GroupState — the applied entry and its term, the membership, and the
// compaction point the log's Retain chose) and a version-2 StoreState
// whose position (the overlays' own count of changes, as their records are
// not all in the WAL) replaces the LSN for reads that settle a frozen
// overlay. WAL files go once no record in them is needed: below the
// checkpoint and below the first record the group's log keeps.
//
// When the leader loses its leadership (or a proposal fails) its overlay
// may hold batches that will never commit: Failed fails the store, and its
// owner abandons it (Abandon: no checkpoint) and opens it again. Open
// recovers the index as of the last checkpoint and hands the WAL's entries
// and hard states to the log; the group then applies again the committed
// entries after the applied index (ApplyEntry). Volatile queues are dropped
// at Open: they were the node's own, as a leader, and their message ids
// could be ones another leader hands out. Message ids carry the group in
// their high 16 bits. A single node's store is refused in replicated mode.
//
// # Reads
//
// A read sees the active overlay over the frozen one (during a checkpoint)
// over an index snapshot taken at the same instant, so a concurrent
// checkpoint never hides or doubles an entry. (The checkpoint commits its
// index batch before it lets go of the frozen overlay: a read whose
// snapshot already holds that checkpoint — its CheckpointLSN covers the
// frozen overlay's last record — leaves the frozen overlay out, which
// matters for counters, where applying it twice would count it twice.)
// Bodies come from an overlay when they are still there, else from their
// segment through the block cache.
//
// The reads a paging queue uses cost what they return:
//
//   - ReadEntries (window.go): one index range scan from (queue, prio,
//     seq) merged with the overlays' changes to that level. Each overlay
//     keeps, per queue and level, the seqs of its puts, deletes and
//     updates in order, so the copy taken under the store's mutex is
//     O(log + max + the level's overlay deletes and updates at or after
//     the seq). Entries come back with their body size (the index value
//     has it; an overlay entry has it from its message) and no body.
//   - ReadRefs (window.go): each ref resolved in the overlays, newest
//     first (a put is the entry, a delete or drop means none, the newest
//     update applies below), the rest through one snapshot iterator in
//     key order.
//   - DeadlineRefs (read.go): the index's expiry keys in the range merged
//     with the overlays' puts that have a deadline in it; overlay deletes
//     are not copied, so a recently deleted entry may be listed.
//   - LoadMessages: bodies from the overlays, the rest from segments in
//     one segment.ReadMany under segMu, their message records read
//     through one forward-seeking iterator (pointreader.go) in id order. A
//     message whose last entry was deleted since the last checkpoint may
//     still be found; after the checkpoint it is store.ErrUnknownMessage.
//
// A checkpoint reads the index entries its deletes and updates name, and
// the message records whose references change, the same way: sorted, one
// iterator sweep, not a Get each. An overlay put whose message is stored
// already (a dead-lettered copy, a message read back) keeps only the
// message's id, so the overlay never holds a body its byte count leaves
// out.
//   - Queues (queues.go): per queue, the index's QueueState (LastSeq and
//     per-level count and bytes, version 2 of the value) as of the last
//     checkpoint, plus each overlay's per-level deltas.
//
// Counting without a read per ack. A put's size is its message's body
// size, known when the batch carries the message or an overlay holds it;
// a delete of an entry of the same overlay takes back its put. A delete
// of an older entry names the entry but not its size: if the frozen
// overlay holds the entry its size is taken from there; otherwise the
// delete counts -1 entry at once and its bytes are pending (likewise the
// size of a replayed put whose message was checkpointed before: the WAL
// record names the message by id only). Queues resolves what is pending
// exactly, with one index point read per pending change from its
// snapshot (a delete of an entry the index does not have gives its count
// back), and writes the results back into the active overlay so each is
// read once. Queues therefore costs O(queues + overlay queues and levels)
// plus, the first time, one index read per pending change: after a
// restart that is every delete replayed from the WAL (bounded by
// CheckpointBytes). The checkpoint does not trust these deltas: it reads
// every deleted entry from the index anyway (for reference counts), so it
// computes the new QueueState from the index's state, the entries it
// deletes (their sizes from the index) and the entries it writes, in the
// same Pebble batch; a dropped queue's state is deleted. A queue state
// written before the counters existed (version 1) is counted once at
// open, from the queue's index entries.
//
// # Validation
//
// The disk store does not check that deletes and updates name existing
// entries (that would cost a read per ack): such a change is applied as a
// no-op and the checkpoint logs it. store.ErrInvalidBatch is never
// returned.
//
// # Faults the store outlives
//
// Only a failed WAL write or fsync fails the store for good (every later
// Apply gets the error): the records may not be on disk, and fsync is
// never retried. Everything else that can run out is retried, with an
// alarm (Options.OnAlarm) while it lasts, and loses nothing:
//
//   - A checkpoint that fails before its index batch commits — out of file
//     descriptors or disk space, a segment fsync, an index read — is
//     abandoned (the segment files it wrote are removed) and retried with
//     a backoff of 50ms to 1s; the WAL still holds all it would have moved.
//     Failures after the commit (removing dead segments, old WAL files)
//     wait for the next checkpoint. AlarmCheckpoint.
//   - The WAL retries starting its next file (package wal). AlarmWAL.
//   - A checkpoint is not started with fewer than checkpointFDs file
//     descriptors free (Options.FreeDescriptors): Pebble treats a failure
//     to create its log file as fatal. The store keeps its own descriptors
//     within Options.MaxOpenFiles (index tables, segment read handles).
//   - The free space is watched on the write path, counting what the store
//     is about to write (space.go). AlarmDisk.
//   - A checkpoint does not commit its index batch without room for it
//     (twice its size and 4 MiB, indexRoom): Pebble treats a failed write
//     of its log or manifest as fatal. It fails with ENOSPC instead and is
//     retried. Space taken from outside between that look and the commit
//     can still stop the process; the WAL keeps every confirmed change,
//     and the next start recovers once there is room.
//
// While an alarm is raised Reserve does not wait on the checkpoint: the
// alarm holds publishers back instead, where clients see it.
//
// # Damage
//
// Damaged files cost what they damaged, never more, and never silently:
//
//   - The WAL is opened with wal.Options.Covered set to the checkpoint
//     LSN: damage in records the index already holds costs nothing and is
//     stepped over. Other damage (not a torn write) makes Open fail with
//     the *wal.CorruptError; wal.Repair drops exactly the damaged records
//     (brokerd repair). A replay that then finds records missing after the
//     checkpoint (skip records) logs it, and deletes, in one batch, the
//     entries of later records whose message was stored by a missing one
//     (a dead-lettered copy of a lost publish), which would otherwise
//     refer to nothing: they are lost with it, and logged.
//   - A damaged segment block loses the messages in it: LoadMessages
//     returns every other message and names those in a *store.DamageError
//     with the file and block offset (the broker takes their entries out
//     of their queues as a counted loss). The store does not fail: reads
//     of other blocks, applies and checkpoints go on. Compaction that
//     meets the damage leaves the segment as it is, never compacts it
//     again, and removes what it wrote; a checkpoint removes the segment
//     once no live message is left in it.
//
// # Snapshots
//
// A replicated store's member too far behind its group's log is sent the
// store instead (snapshot.go). CreateSnapshot checkpoints and then, holding
// cpMu (no checkpoint or compaction changes the index or removes a
// segment meanwhile), copies the index with Pebble's checkpoint and
// hard-links the segment files the index refers to (segment files are
// never written once finished); the copy is the group's state as of the
// GroupState it holds. Close and Abandon wait for a snapshot being made.
//
// IngestSnapshot replaces a closed store with one: it builds the new store
// in DIR/ingest.tmp (the snapshot's index, its store state's checkpoint
// LSN reset to 0 — the new WAL starts afresh — and its group's log
// compacted to just before the entries given; its segments; a new WAL
// holding those entries and the member's hard state), fsyncs it, renames
// it to DIR/ingest (the commit point) and moves its parts over the old
// ones. Open finishes a committed ingest a crash interrupted (idempotently:
// a part already moved is not moved again) and removes an uncommitted one,
// so a crash leaves the old store or the new one, never a mix.
//
// # Layout of the data directory
//
//	DIR/wal/        WAL files (package wal)
//	DIR/segments/   segment files (package segment)
//	DIR/index/      the Pebble database (package index's keyspace)
//	DIR/ingest.tmp/, DIR/ingest/   a snapshot being ingested (see above)
package diskstore
