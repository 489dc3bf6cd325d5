package wal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// LSN is a record's log sequence number: 1, 2, 3 … in Append order. 0 is no
// record.
type LSN uint64

// SyncPolicy says when a Durable record counts as durable. It is
// configuration, not part of the on-disk format.
type SyncPolicy uint8

const (
	// SyncFsync (the default) completes a record after an fsync that covers
	// it. One fsync covers every record queued while the previous one ran.
	SyncFsync SyncPolicy = iota
	// SyncInterval completes a record after its write; written data is
	// fsync'd at least every Options.SyncInterval.
	SyncInterval
	// SyncNone completes a record after its write; the writer fsyncs only
	// when it finishes a file, on Sync and on Close.
	SyncNone
)

var syncPolicyNames = [...]string{SyncFsync: "fsync", SyncInterval: "interval", SyncNone: "none"}

// String returns the policy's configuration name.
func (p SyncPolicy) String() string {
	if int(p) < len(syncPolicyNames) {
		return syncPolicyNames[p]
	}
	return fmt.Sprintf("SyncPolicy(%d)", uint8(p))
}

// ParseSyncPolicy parses "fsync", "interval" or "none".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	for p, name := range syncPolicyNames {
		if s == name {
			return SyncPolicy(p), nil
		}
	}
	return 0, fmt.Errorf("wal: unknown sync policy %q (want fsync, interval or none)", s)
}

// MarshalText implements encoding.TextMarshaler, for configuration files.
func (p SyncPolicy) MarshalText() ([]byte, error) {
	if int(p) >= len(syncPolicyNames) {
		return nil, fmt.Errorf("wal: unknown sync policy %d", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseSyncPolicy.
func (p *SyncPolicy) UnmarshalText(b []byte) error {
	v, err := ParseSyncPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Class is a record's class. It is stored in every record.
type Class uint8

// on-disk format; never renumber
const (
	// Durable records are synced per the SyncPolicy and replayed at Open.
	Durable Class = 1
	// Volatile records are written, never waited on for an fsync, and
	// skipped by Replay: they are discarded at Open.
	Volatile Class = 2
	// classSkip records stand for records that were damaged and dropped
	// (Repair, or Open for damage a checkpoint covers): never appended by
	// a caller, never replayed. See the package doc.
	classSkip Class = 3
)

// String returns "durable", "volatile" or Class(n).
func (c Class) String() string {
	switch c {
	case Durable:
		return "durable"
	case Volatile:
		return "volatile"
	case classSkip:
		return "skip"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// valid reports whether a caller may append records of class c.
func (c Class) valid() bool { return c == Durable || c == Volatile }

// onDisk reports whether c is a class a record on disk may have.
func (c Class) onDisk() bool { return c == Durable || c == Volatile || c == classSkip }

// Options configure a WAL. Zero values take the defaults.
type Options struct {
	// FS is the filesystem (default vfs.Default). Tests pass a crashable
	// in-memory one or one that injects errors.
	FS vfs.FS
	// SegmentSize is the size files are preallocated to (default 64 MiB).
	// A file takes records until the next one does not fit; a record larger
	// than SegmentSize gets a file of its own, sized to fit.
	SegmentSize int64
	// Sync is the sync policy (default SyncFsync).
	Sync SyncPolicy
	// SyncInterval bounds how long written data stays unsynced under
	// SyncInterval (default 10ms).
	SyncInterval time.Duration
	// MaxPending bounds the bytes appended but not yet written: Reserve
	// blocks above it (default 64 MiB).
	MaxPending int64
	// Logger receives repair reports and failures (default slog.Default()).
	Logger *slog.Logger
	// OnStall, if set, is called on the WAL's goroutine when the writer
	// cannot start a new file and begins retrying (with the error), and
	// again with nil once it has started one or gave up at Close. It must
	// not block.
	OnStall func(err error)
	// Covered is the highest LSN whose record the caller no longer needs
	// from the log: its effect is held elsewhere (the store's checkpoint).
	// Damage confined to records up to Covered costs nothing, so Open
	// steps over it instead of refusing to open; Replay is never asked for
	// those records. Default 0: every record counts.
	Covered LSN
	// AfterGroup, if set, runs on the WAL's goroutine after the
	// completions of each group commit (one write and at most one fsync),
	// before the goroutine waits for more. A store uses it to let the
	// completions of one group share work, e.g. one coalesced publisher
	// confirm per channel per fsync. It must not block.
	AfterGroup func()
}

const (
	defaultSegmentSize  = 64 << 20
	defaultSyncInterval = 10 * time.Millisecond
	defaultMaxPending   = 64 << 20
	// minSegmentSize keeps a file able to hold a header and a small record;
	// smaller values are only useful to tests, which want many files.
	minSegmentSize = fileHeaderSize + recordHeaderSize
)

// withDefaults returns o with defaults filled in, or why it is invalid.
func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = defaultSegmentSize
	}
	if o.SegmentSize < minSegmentSize {
		return o, fmt.Errorf("wal: segment size %d is below the minimum %d", o.SegmentSize, minSegmentSize)
	}
	if int(o.Sync) >= len(syncPolicyNames) {
		return o, fmt.Errorf("wal: unknown sync policy %d", uint8(o.Sync))
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = defaultSyncInterval
	}
	if o.MaxPending <= 0 {
		o.MaxPending = defaultMaxPending
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
