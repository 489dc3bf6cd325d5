package diskstore

// The WAL records of replication groups: a group's Raft log
// entries and hard states, kept in the store's one WAL next to its own
// batches (codec.go, version 3).

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
