// Package wal is brokerd's write-ahead log: an append-only sequence of
// records in preallocated files, written by one goroutine that commits
// records in groups (one write and, under SyncFsync, one fsync per group).
//
// # Records and LSNs
//
// Every record gets a log sequence number (LSN): 1, 2, 3 … in Append order.
// LSNs are never reused while the log runs, and continue across restarts
// from the last record found on disk. Records that never reached the disk
// (lost in a crash before their fsync, or failed by a write error) leave no
// trace, so their numbers are given out again after a restart; the durable
// history never holds two records with one LSN.
//
// A record has a class. Durable records are synced per the SyncPolicy and
// given to Replay. Volatile records are written but never waited on for an
// fsync, and Replay skips them: they are discarded at Open. (ReplayClasses
// shows them too, for what a caller must not lose track of, such as ids.)
//
// # Files
//
// The log lives in one directory. Each file is named after the LSN of its
// first record, as 16 lower-case hex digits plus ".wal":
//
//	0000000000000001.wal  records 1 … 4711
//	0000000000001268.wal  records 4712 …
//
// Open creates the directory if it is missing (and fsyncs its parent). The
// directory may also hold LOCK (held while the log is open) and spare.tmp
// (a finished file kept for reuse, not part of the log). Any other name
// makes Open fail: it is not ours, and guessing is how data is lost.
//
// A file is created with its header written and fsync'd, preallocated to
// Options.SegmentSize, and the directory fsync'd. Records are appended until
// the next one does not fit; then the file is fsync'd and closed and the
// next file is created. A record never crosses files. A record larger than
// a file gets a file of its own, sized to fit. Only the last file is ever
// written to. RemoveBefore deletes files from the front, oldest first, with a
// directory fsync after each, so the files on disk are always a gapless run
// of LSNs.
//
// RemoveBefore keeps one finished file, renamed to spare.tmp, and the next
// file is started from it when it is there: its header is written over the
// old one, followed by a zero record header, fsync'd, and the file renamed
// (spare.go says why: an fdatasync inside blocks written before needs no
// journal commit). Such a recycled file holds its earlier life's records
// after the new ones; each write to it is followed by a zero record header,
// so the new records always end in one.
//
// Preallocation keeps the file size (st_size) at what was written, so in a
// new file the bytes after the last record read as the end of the file or
// as zeros. A record header of all zeros, or the end of the file, is the
// clean end of a file, unless records of this file's life (LSNs from the
// one expected on) follow it, which is damage; zeros or an earlier life's
// bytes may.
//
// # File header
//
// The layouts below are the on-disk format; never renumber. All integers
// are little-endian.
//
//	 0       4       8               16      20
//	+-------+-------+---------------+-------+
//	| magic |version|   first LSN   |  CRC  |
//	+-------+-------+---------------+-------+
//
//	magic     4 bytes  "bdwl" (0x62 0x64 0x77 0x6c)
//	version   uint32   format version, 1
//	first LSN uint64   LSN of the file's first record; equals the file name
//	CRC       uint32   CRC-32C (Castagnoli) of bytes [0, 16)
//
// # Record
//
// Records follow the header back to back, with no padding:
//
//	 0       4       8   9               17
//	+-------+-------+---+---------------+---------------- … -+
//	|  CRC  |length |cls|      LSN      | payload (length B)  |
//	+-------+-------+---+---------------+---------------- … -+
//
//	CRC     uint32  CRC-32C (Castagnoli) of bytes [4, 17+length): everything
//	                after the CRC field, header and payload
//	length  uint32  payload length, at most MaxRecordSize
//	cls     uint8   class: 1 Durable, 2 Volatile, 3 Skip (0 is never a record)
//	LSN     uint64  the record's LSN, never 0
//
// Because each record carries its LSN, a reader accepts a record only if
// its LSN is the one after the previous record's (the file's first LSN for
// the first record), which rejects stale bytes that happen to checksum.
//
// A Skip record stands for records that were damaged and dropped: Repair
// writes one over the damaged bytes, of exactly their length, and Open
// one at a damaged end of the last file that a checkpoint covers. Its
// payload is the LSN of the record that follows it, then zeros:
//
//	 0               8
//	+---------------+---------------- … -+
//	|   next LSN    | zeros              |
//	+---------------+---------------- … -+
//
//	next LSN  uint64  LSN of the next record, at least the Skip record's own
//	                  (equal: it stands for no record, just fills bytes)
//
// so it stands for the LSNs from its own up to next-1. A Skip record whose
// payload is shorter than 8 bytes stands for its own LSN only (a damaged
// record of 17 to 24 bytes). Skip records are never given to Replay; an
// older build refuses a log that holds one (bad record class), as it
// should: it cannot read past it.
//
// # Open and repair
//
// Open lists the files, checks that their names form a gapless sequence
// (each file's first LSN is one after the previous file's last record),
// and reads every header and every record. Damage does not stop the
// reading: at each damaged span it looks for the first intact record of
// the file's life after it (a record with a good CRC and an LSN from the
// one expected on), and goes on from there. So it knows, for each damage,
// which LSNs are lost (those between the last intact record before it and
// the first intact one after it, or the next file's first LSN) and what
// intact records follow (CorruptError). Then:
//
//   - A torn write at the end of the last file — the records of the group
//     being written when the process or machine stopped — is dropped: the
//     file is zeroed from the damage to its end and fsync'd, and Open logs
//     the offset, the reason and the bytes dropped. The damage is a torn
//     write when nothing intact follows it in the file, or when the
//     damaged span holds a sector (512 aligned bytes) that was never
//     written: all zeros in a new file, or a whole record of a reused
//     file's earlier life (spare.go). The kernel writes a group's pages
//     back in any order, so a crash can leave a later page of a group on
//     disk and an earlier one not; none of it was fsync'd, so none of it
//     was confirmed. Open logs intact records it drops after such a sector
//     as an error: zeros that were written (a lost write, or a body of
//     zeros around a flipped bit) cannot be told from a sector never
//     written.
//   - Any other damage — a flipped bit, a bad length or LSN, a damaged
//     file header, a file missing, damage in a file before the last
//     (those were fsync'd before the next file was created) — is not a
//     torn write, and records confirmed to someone may be in it and after
//     it. Open writes nothing and returns a *CorruptError naming the file,
//     the offset, the LSNs lost and the intact records after the damage.
//     Repair (below) drops the damaged records only, on request.
//   - Unless Options.Covered covers it: damage whose lost records all have
//     LSNs up to Covered costs nothing (the caller's checkpoint holds what
//     they did), so Open logs it and steps over it, in memory: Replay
//     jumps from the damage to the first intact record after it (or reads
//     a file with a damaged header as if the header were intact). Open
//     writes nothing for it, except at the end of the last file: damage
//     there is zeroed, and a Skip record written in its place takes the
//     log on to Covered+1, so new records never reuse an LSN the
//     checkpoint counts as done. Records up to Covered were fsync'd before
//     the checkpoint, so damage among them is never a torn write.
//   - A last file whose header was never completed (shorter than a header,
//     or an all-zero header) and that holds no record of its life holds
//     nothing; it is created again. (Headers are fsync'd before any record
//     is written, so records after a missing header are damage.)
//
// After Open, new records are appended to the last file after its last
// valid record (a new file is created only when the directory is empty or
// the last file's header was incomplete). Reopening a log never creates a
// file by itself.
//
// Open reads every file once to validate it and Replay reads the files again
// (from the page cache, usually); the log's length is bounded by the store's
// checkpoints.
//
// Check reads a log as Open does and reports every damage, writing nothing
// and taking no lock. Repair, given Check's report, drops exactly what it
// names: a damaged span with intact records after it becomes one Skip
// record of the same length (the LSN chain and every record after it stay
// as they were), a damaged file header is written again from the file's
// name, a damaged end of a file before the last (or a missing file)
// becomes a Skip record to the next file's first LSN, and a torn write at
// the end of the last file is zeroed, as Open does. It writes nothing if
// the log's damage changed since the report or if any of it cannot be
// repaired (a span too short for a record header; files whose LSNs
// overlap).
//
// # Reading by LSN
//
// ReadAt reads one record by its LSN while the log runs: for a reader that
// needs a record again after it left memory, such as a Raft leader serving
// a follower the entries its cache no longer holds. Every record whose
// write to its file returned can be read, in every file still in the log,
// Volatile ones with their class, and those Open found as soon as it
// returns. ReadAt does not wait for a record's fsync: the bytes are those
// appended either way (checked, below), a failed fsync fails the log and
// ReadAt returns the sticky error from then on, and durability is what
// Append's done reports (a caller that may serve only durable records asks
// only for those). A second watermark for fsync'd records would cost the
// writer and buy nothing.
//
// ReadAt returns ErrRemoved (wrapped) below the first file still in the log,
// ErrNotWritten above the last record written, the sticky error after a
// failure, ErrClosed once Close began, and a *CorruptError (wrapped) when
// the record's bytes do not check out — its CRC, its length, its LSN, or
// the chain of LSNs it is reached by — or it was lost to damage (a Skip
// record, damage Open stepped over). It never returns bytes other than
// those appended.
//
// Records are found through an index each file keeps in memory: an entry
// (LSN, offset: 16 bytes) for its first record, for the first record after
// damage Open stepped over, and for the first record that starts at least
// 16 KiB (indexStride) after the previous entry: at most 1 KiB of index per
// MiB of log, whatever the record sizes. A file the writer starts gets its
// index allocated whole, 64 KiB for a 64 MiB file (16 bytes per 16 KiB of
// its size; a file grown for one large record, one entry); Open builds the
// index of the files it finds as it reads them. The writer adds the entries
// of each write once the write returned, under the lock that lists the
// files (one lock per write, not per record). A read finds the file and the
// entry at or below the LSN by binary search, reads 20 KiB (readWindow)
// from the entry, walks the record headers in it to the record, checking
// that their LSNs follow each other, and reads the rest of a larger payload
// straight into the caller's buffer: 1.1 to 1.4 µs for a record of up to
// 1 KiB in the page cache, 2.3 µs for 16 KiB (BenchmarkReadAt/hot). An entry
// every 4 KiB read small records in 0.8 µs for four times the index, every
// 64 KiB in 3 to 4 µs.
//
// Removal and recycling: RemoveBefore raises ReadAt's floor past a file
// and closes ReadAt's handle on it before it removes or recycles it, and
// drops the file's index with it. A ReadAt that was reading the file when
// it went finds the floor above its LSN when it ends and returns
// ErrRemoved, whatever it read: a recycled file's new records are written
// only after its rename, so they are never taken for the old. Within a
// file a read never goes past the last record written, so a recycled
// file's earlier life is never read.
//
// Descriptors: ReadAt keeps at most 4 files open (readHandles, the most
// recently read), plus, while it lasts, one per ReadAt of a file not among
// them. A file outside them costs an open and a close per read, 3 to 8 µs
// more (BenchmarkReadAt/cold: 4.4 to 5.9 µs a read on a quiet machine).
// RemoveBefore closes a removed file's handle, Close all of them.
//
// # Writer and durability
//
// Appenders encode their record into a shared pending buffer under a mutex
// and wake the writer goroutine. The writer takes the whole buffer (a group),
// writes it with one write per file it touches, and then:
//
//   - SyncFsync: fsyncs once and completes the group. Records appended while
//     that fsync ran form the next group, so one fsync covers every record
//     queued during the previous one.
//   - SyncInterval: completes the group after the write; fsyncs when data
//     written at least Options.SyncInterval ago is not yet synced.
//   - SyncNone: completes the group after the write; fsyncs only when a file
//     is finished, on Sync and on Close.
//
// Volatile records complete after the write under every policy, except that
// completions run in LSN order, so a Volatile record behind a Durable one in
// the same group waits for that record's fsync.
//
// A failed write or fsync is sticky: the writer stops writing, every pending
// and later completion, Sync, Reserve and Close returns the error, and fsync
// is never retried (after a failed fsync the kernel may have dropped the
// dirty pages, so a retry that succeeds proves nothing).
//
// A failure to start the next file (create it or reuse the spare, write and
// fsync its header, preallocate it, fsync the directory: out of file
// descriptors or disk space, typically) loses nothing, since no record was
// written to it: the writer removes what it created and retries, with a
// backoff doubling from 10ms to 1s, holding the group meanwhile. Stalled
// reports it and Options.OnStall is told when it begins and ends; appenders
// are held back by Reserve once MaxPending is queued. Close ends the
// retries: the records of the group written to files finished before the
// stall complete, the rest fail with the error, which sticks.
package wal
