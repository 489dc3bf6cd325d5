package diskstore

// The WAL records of replication groups: a group's Raft log entries and
// hard states, kept in the store's one WAL next to its own batches
// (codec.go, version 3; doc.go, "Record kinds").

import (
	"errors"
	"fmt"

	"github.com/brokerd/brokerd/wal"
)

// LogEntry is a Raft log entry of a replication group as a WAL record
// holds it: etcd raft's raftpb.Entry and the group it belongs to.
type LogEntry struct {
	Group uint64
	Term  uint64
	Index uint64
	// Type is the Raft entry type (raftpb.EntryType: 0 normal, 1 conf
	// change, 2 conf change v2); the store does not interpret it.
	Type uint8
	// Data is the entry's payload, opaque to the store (the replica
	// layer's encoded proposal). A replayed entry's Data is a copy its
	// receiver owns (non-nil, possibly empty).
	Data []byte
}

// HardState is a replication group's Raft HardState as a WAL record holds
// it: etcd raft's raftpb.HardState and the group it belongs to.
type HardState struct {
	Group  uint64
	Term   uint64
	Vote   uint64
	Commit uint64
}

// ReplicaLog receives, while Open recovers the store, the WAL's records
// of replication groups: their Raft log entries and hard states (doc.go,
// "Record kinds"). The store neither applies nor interprets them.
//
// Open calls it on the goroutine that called Open, one record at a time,
// in LSN order, interleaved with its replay of the store's own batches (a
// batch at a lower LSN is in the overlay before a record at a higher one
// is handed over), and only for records after the checkpoint LSN. Building a
// group's log from them is the receiver's: in particular an entry (g, i)
// discards every entry of g with index ≥ i that an earlier record held
// (the logical suffix truncation rule). An error stops the recovery: Open
// returns it, wrapped with the record's LSN.
type ReplicaLog interface {
	ReplayEntry(lsn wal.LSN, e LogEntry) error
	ReplayHardState(lsn wal.LSN, hs HardState) error
}

// ErrNoReplicaLog is wrapped by Open's error when the WAL holds a
// replication group's record (an entry or a hard state) and
// Options.ReplicaLog is not set: a single-node store cannot apply
// replicated data, and must not skip it. The error names the record's LSN.
var ErrNoReplicaLog = errors.New("diskstore: a replication record in the WAL and no Options.ReplicaLog to replay it")

// replayReplica hands r, the entry or hard state at lsn, to
// Options.ReplicaLog.
func (s *Store) replayReplica(lsn wal.LSN, r *walRecord) error {
	group := r.entry.Group
	if r.kind == kindHardState {
		group = r.hardState.Group
	}
	rl := s.opts.ReplicaLog
	if rl == nil {
		return fmt.Errorf("wal record %d (%s of group %d): %w", lsn, kindName(r.kind), group, ErrNoReplicaLog)
	}
	var err error
	if r.kind == kindEntry {
		err = rl.ReplayEntry(lsn, r.entry)
	} else {
		err = rl.ReplayHardState(lsn, r.hardState)
	}
	if err != nil {
		return fmt.Errorf("wal record %d: replay %s of group %d: %w", lsn, kindName(r.kind), group, err)
	}
	return nil
}
