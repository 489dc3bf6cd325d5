// Package replicatest holds what tests of replication share: a Raft log
// kept in memory.
package replicatest

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// MemLog is a replica.LogStorage in memory: etcd raft's MemoryStorage,
// whose Append already discards a conflicting suffix, and the membership
// an applied change left. A write "is durable" when it returns and Sync
// has nothing to do: a member's crash in a test loses what its Group held
// in memory, never its log (a WAL-backed storage's tests crash the file
// system instead). Not safe for concurrent use beyond MemoryStorage's own
// locking: one member's loop uses it.
type MemLog struct {
	*raft.MemoryStorage
	cs *pb.ConfState
}

// NewMemLog returns an empty log.
func NewMemLog() *MemLog { return &MemLog{MemoryStorage: raft.NewMemoryStorage()} }

// InitialState returns the hard state and the membership last saved.
func (l *MemLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	hs, cs, err := l.MemoryStorage.InitialState()
	if l.cs != nil {
		cs = l.cs
	}
	return hs, cs, err
}

// Save writes hs (if not nil) and appends ents.
func (l *MemLog) Save(hs *pb.HardState, ents []*pb.Entry) error {
	if hs != nil {
		if err := l.SetHardState(hs); err != nil {
			return err
		}
	}
	return l.Append(ents)
}

// Sync does nothing: every write is already "durable".
func (l *MemLog) Sync() error { return nil }

// SaveConfState records the membership.
func (l *MemLog) SaveConfState(cs *pb.ConfState) error {
	l.cs = cs
	return nil
}
