package index

import (
	"fmt"
	"log"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FormatMajorVersion is the Pebble format the index is created with. It is
// pinned rather than FormatNewest so that upgrading Pebble never ratchets an
// existing store's format (which would make a downgrade impossible) as a
// side effect; raising it is a deliberate change. It is at least
// FormatWALSyncChunks (Pebble's WAL replay can tell a torn tail from
// corruption) and FormatTableFormatV6 (sstable footers carry a checksum).
const FormatMajorVersion = pebble.FormatTableFormatV6

// Tuning, see Options.
const (
	memTableSize      = 16 << 20 // bytes
	memTableStopCount = 4        // memtables queued before writes stall
	bloomBitsPerKey   = 10       // ~1% false positives
	l0Compaction      = 32       // L0 files (sublevels) before L0 is compacted
	l0StopWrites      = 3 * l0Compaction
)

// Options returns Pebble options for the index on fs (nil: the OS
// filesystem) with a block cache of cacheBytes (<= 0: Pebble's default,
// 8 MiB). Each call returns a new *Options the caller may adjust before
// pebble.Open. Why these values:
//
//   - The workload is small values (entry, message and state values are tens
//     of bytes), point lookups (message and queue-state keys) and short range
//     scans (a queue level's head, the next expiries). A bloom filter on
//     every level, L0 included, lets a point lookup skip sstables that do
//     not hold its key; it is built on whole keys (the default comparer has
//     no prefix split), and range scans are unaffected by it.
//   - The keys are designed for bytewise order, so the comparer is Pebble's
//     default, set explicitly.
//   - The block cache is created by pebble.Open and released by Close (via
//     CacheSize, not a shared *cache.Cache), so the caller owns no reference.
//   - Checkpoints arrive as one large batch. A 16 MiB memtable (Pebble's
//     default is 4 MiB) takes a checkpoint of some 100k entries without a
//     flush in the middle; up to 4 of them may queue while one flushes so a
//     checkpoint does not stall behind a slow flush, and memory stays bounded
//     at 64 MiB.
//   - L0 is compacted once it holds 32 files (Pebble's default is 4), and
//     writes stop only at 96 (default 12). Every checkpoint flushes an
//     sstable into L0 that spans nearly the whole keyspace (the state keys
//     at its start, new message and entry keys at the ends of their
//     ranges), so each L0 compaction rewrites most of Lbase: the fewer
//     there are, the less Pebble rewrites. Filling a 1M backlog with one
//     producer and confirms: broker CPU 9.0–9.7 s at 8 files, 7.1–7.8 s at
//     32, publish rate 162–174k → 188–209k msgs/s; its drain unchanged
//     (246–261k msgs/s): point lookups skip L0 files by their bloom
//     filters, and a paging read seeks each level once per window.
//   - The logger drops Pebble's informational chatter and keeps errors; a
//     fatal error (Pebble's invariant violations) panics after logging, as
//     Pebble requires Fatalf not to return.
//   - Data corruption (a block that fails its checksum) is not fatal: by
//     default Pebble hands it to Logger.Fatalf, and a damaged block read
//     while serving brought the process down, and again after every
//     restart. It is logged, and the read or compaction that met it fails
//     with the error as usual; OnCorruption lets the store fail with the
//     file named instead. (Verify checks every block before a store serves.)
//   - Pebble's WAL stays enabled: the store relies on it when it commits a
//     checkpoint with pebble.Sync.
//   - The format is pinned (FormatMajorVersion).
func Options(fs vfs.FS, cacheBytes int64) *pebble.Options {
	opts := &pebble.Options{
		FS:                          fs,
		Comparer:                    pebble.DefaultComparer,
		FormatMajorVersion:          FormatMajorVersion,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopCount,
		L0CompactionThreshold:       l0Compaction,
		L0StopWritesThreshold:       l0StopWrites,
		Logger:                      quietLogger{},
		EventListener: &pebble.EventListener{
			DataCorruption: logCorruption,
		},
	}
	if cacheBytes > 0 {
		opts.CacheSize = cacheBytes
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	return opts
}

// Open opens (creating if needed) the Pebble index in dir on fs with
// Options(fs, cacheBytes). The caller closes the DB.
func Open(dir string, fs vfs.FS, cacheBytes int64) (*pebble.DB, error) {
	db, err := pebble.Open(dir, Options(fs, cacheBytes))
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", dir, err)
	}
	return db, nil
}

// OnCorruption makes the index opened with opts call fn, besides logging,
// when Pebble finds damage in one of its files. fn runs on the goroutine
// that found it, in the middle of a read or a compaction: it must not
// block or call the index.
func OnCorruption(opts *pebble.Options, fn func(*CorruptionError)) {
	opts.EventListener.DataCorruption = func(info pebble.DataCorruptionInfo) {
		logCorruption(info)
		fn(&CorruptionError{File: info.Path, Level: -1, Bounds: describeBounds(info.Bounds.Start, info.Bounds.End.Key), Err: info.Details})
	}
}

// logCorruption logs damage Pebble found, in one line (Pebble's own
// formatting of it carries a stack trace).
func logCorruption(info pebble.DataCorruptionInfo) {
	quietLogger{}.Errorf("on-disk corruption in %s (keys %s): %v", info.Path, describeBounds(info.Bounds.Start, info.Bounds.End.Key), info.Details)
}

// quietLogger is a pebble.Logger that keeps only errors. It is safe for
// concurrent use (the standard logger is).
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	_ = log.Output(2, "pebble: "+fmt.Sprintf(format, args...))
}

func (quietLogger) Fatalf(format string, args ...any) {
	msg := "pebble: fatal: " + fmt.Sprintf(format, args...)
	_ = log.Output(2, msg)
	panic(msg)
}
