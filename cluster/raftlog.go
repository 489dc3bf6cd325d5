package cluster

import (
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/wal"
)

// raftLog is a group's Raft log kept in the replicated disk store's WAL
// (replica.LogStorage over diskstore's entry and hard state records): the
// entries since the compaction point, each with the LSN of its record and,
// while the cache allows, its data; the hard state and membership.
//
// Open hands it the WAL's records (diskstore.ReplicaLog), before the store
// exists for it; restore then cuts it at the index's compaction point.
// From then on the group's member saves to it (on the node's loop) and
// raft reads it (on the same loop); a checkpoint's Retain runs on the
// store's checkpoint goroutine. mu guards everything.
type raftLog struct {
	group uint64
	st    *diskstore.Store // set by attach, after Open

	mu sync.Mutex
	hs *pb.HardState
	cs *pb.ConfState
	// hsLSN is the latest hard state record's LSN: a WAL file holding it
	// must stay.
	hsLSN wal.LSN
	// Entries first..first+len(ents)-1; first-1 is the compaction point,
	// whose term is snapTerm.
	first    uint64
	snapTerm uint64
	ents     []logEnt
	cached   int64 // bytes of entry data held in ents
	maxCache int64
	// need, if set, returns the lowest index a member still needs from
	// this log (a follower behind, as the leader sees it), 0 if none:
	// Retain keeps it, up to maxKeep entries and needFactor × keepBytes
	// of entry data behind the applied index (a member further behind
	// catches up from a snapshot). Besides, Retain always keeps
	// keepBytes of entry data behind the applied index (at least the
	// applied entry): a follower that restarts, or a member that becomes
	// leader, finds there the entries the others lack.
	need      func() uint64
	maxKeep   uint64
	keepBytes int64
	// snapshot, if set, is Snapshot's: the latest snapshot at or after
	// index (the compaction point), or ErrSnapshotTemporarilyUnavailable
	// while one is made. It must not block.
	snapshot func(index uint64) (*pb.Snapshot, error)
}

// needFactor bounds what Retain keeps for members behind: needFactor ×
// keepBytes of entries behind the applied index.
const needFactor = 4

// DefaultLogKeepBytes is Config.LogKeepBytes's default.
const DefaultLogKeepBytes = 256 << 20

type logEnt struct {
	term uint64
	typ  pb.EntryType
	lsn  wal.LSN
	data []byte // nil once evicted from the cache (read back by lsn)
	size int
}

func newRaftLog(group uint64) *raftLog {
	return &raftLog{group: group, first: 1, maxCache: 64 << 20, maxKeep: 1 << 20, keepBytes: DefaultLogKeepBytes, hs: &pb.HardState{}, cs: &pb.ConfState{}}
}

// ReplayEntry implements diskstore.ReplicaLog: etcd raft's suffix rule.
func (l *raftLog) ReplayEntry(lsn wal.LSN, e diskstore.LogEntry) error {
	if e.Group != l.group {
		return fmt.Errorf("an entry of group %d in group %d's store", e.Group, l.group)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.first + uint64(len(l.ents)) - 1
	switch {
	case len(l.ents) == 0:
		l.first = e.Index
	case e.Index < l.first:
		// Before what the log holds: the log restarts there.
		l.ents, l.cached, l.first = nil, 0, e.Index
	case e.Index > last+1:
		return fmt.Errorf("entry %d after entry %d: a hole in the log", e.Index, last)
	default:
		l.truncateLocked(e.Index)
	}
	l.appendLocked(logEnt{term: e.Term, typ: pb.EntryType(e.Type), lsn: lsn, data: e.Data, size: len(e.Data)})
	return nil
}

// ReplayHardState implements diskstore.ReplicaLog.
func (l *raftLog) ReplayHardState(lsn wal.LSN, hs diskstore.HardState) error {
	if hs.Group != l.group {
		return fmt.Errorf("a hard state of group %d in group %d's store", hs.Group, l.group)
	}
	l.mu.Lock()
	l.hs = newHardState(hs.Term, hs.Vote, hs.Commit)
	l.hsLSN = lsn
	l.mu.Unlock()
	return nil
}

// attach gives the log its store once Open returned, and cuts what the
// replay found at the index's compaction point. It returns the applied
// index the group restarts from.
func (l *raftLog) attach(st *diskstore.Store) (applied uint64, err error) {
	gs, err := st.GroupState()
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st = st
	if len(gs.ConfState) > 0 {
		l.cs = &pb.ConfState{}
		if err := proto.Unmarshal(gs.ConfState, l.cs); err != nil {
			return 0, fmt.Errorf("group %d's membership: %w", l.group, err)
		}
	}
	if len(l.ents) == 0 {
		l.first, l.snapTerm = gs.Compacted+1, gs.CompactedTerm
	} else {
		if l.first > gs.Compacted+1 {
			return 0, fmt.Errorf("group %d's log starts at entry %d, after its compaction point %d", l.group, l.first, gs.Compacted)
		}
		l.compactLocked(gs.Compacted, gs.CompactedTerm)
		if l.first == gs.Compacted+1 {
			// The log starts right after the compaction point (an
			// ingested snapshot's does): Term answers for it.
			l.snapTerm = gs.CompactedTerm
		}
	}
	last := l.first + uint64(len(l.ents)) - 1
	if commit := l.hs.GetCommit(); gs.Applied > last || gs.Applied > commit && gs.Applied > gs.Compacted {
		return 0, fmt.Errorf("group %d applied entry %d, but its log ends at %d (commit %d)", l.group, gs.Applied, last, commit)
	}
	if l.hs.GetCommit() > last {
		// Commit never goes past what this log holds.
		l.hs = newHardState(l.hs.GetTerm(), l.hs.GetVote(), last)
	}
	return gs.Applied, nil
}

func (l *raftLog) lastLocked() uint64 { return l.first + uint64(len(l.ents)) - 1 }

func (l *raftLog) truncateLocked(from uint64) {
	if from < l.first {
		from = l.first
	}
	for i := from - l.first; i < uint64(len(l.ents)); i++ {
		if l.ents[i].data != nil {
			l.cached -= int64(l.ents[i].size)
		}
		l.ents[i] = logEnt{}
	}
	if n := from - l.first; n < uint64(len(l.ents)) {
		l.ents = l.ents[:n]
	}
}

func (l *raftLog) appendLocked(e logEnt) {
	l.ents = append(l.ents, e)
	if e.data != nil {
		l.cached += int64(e.size)
	}
	// Evict the oldest cached data over the bound: raft reads recent
	// entries (followers keeping up); a lagging one reads the WAL.
	for i := 0; l.cached > l.maxCache && i < len(l.ents); i++ {
		if l.ents[i].data != nil {
			l.cached -= int64(l.ents[i].size)
			l.ents[i].data = nil
		}
	}
}

// compactLocked drops the entries up to index, whose term is term.
func (l *raftLog) compactLocked(index, term uint64) {
	if index < l.first {
		return
	}
	n := min(index-l.first+1, uint64(len(l.ents)))
	for i := range n {
		if l.ents[i].data != nil {
			l.cached -= int64(l.ents[i].size)
		}
	}
	l.ents = append([]logEnt(nil), l.ents[n:]...)
	l.first, l.snapTerm = index+1, term
}

// InitialState implements raft.Storage.
func (l *raftLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hs, l.cs, nil
}

// Entries implements raft.Storage.
func (l *raftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo < l.first {
		return nil, raft.ErrCompacted
	}
	if hi > l.lastLocked()+1 {
		return nil, raft.ErrUnavailable
	}
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; i++ {
		e := &l.ents[i-l.first]
		data := e.data
		if data == nil && e.size > 0 {
			le, err := l.st.ReadReplica(e.lsn)
			if err != nil {
				return nil, fmt.Errorf("group %d entry %d: %w", l.group, i, err)
			}
			if le.Index != i || le.Group != l.group {
				return nil, fmt.Errorf("group %d entry %d: the record at LSN %d is group %d's entry %d", l.group, i, e.lsn, le.Group, le.Index)
			}
			data = le.Data
		}
		size += uint64(len(data)) + 16
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, &pb.Entry{Term: proto.Uint64(e.term), Index: proto.Uint64(i), Type: e.typ.Enum(), Data: data})
	}
	return out, nil
}

// Term implements raft.Storage.
func (l *raftLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case i == l.first-1:
		return l.snapTerm, nil
	case i < l.first:
		return 0, raft.ErrCompacted
	case i > l.lastLocked():
		return 0, raft.ErrUnavailable
	}
	return l.ents[i-l.first].term, nil
}

// LastIndex implements raft.Storage.
func (l *raftLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLocked(), nil
}

// FirstIndex implements raft.Storage.
func (l *raftLog) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first, nil
}

// Snapshot implements raft.Storage: for a follower behind the compaction
// point, the latest snapshot of the store at or after it (snapshot.go);
// while none is ready raft is told to try again later.
func (l *raftLog) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	point, snap := l.first-1, l.snapshot
	l.mu.Unlock()
	if snap == nil {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return snap(point)
}

// entryAt returns entry i and the term of the one before it, as the log
// holds them (for a snapshot at i).
func (l *raftLog) entryAt(i uint64) (*pb.Entry, uint64, error) {
	ents, err := l.Entries(i, i+1, 1<<62)
	if err != nil {
		return nil, 0, err
	}
	prev, err := l.Term(i - 1)
	if err != nil {
		return nil, 0, err
	}
	return ents[0], prev, nil
}

// Save implements replica.LogStorage: the records go to the WAL now and
// are durable after Sync.
func (l *raftLog) Save(hs *pb.HardState, entries []*pb.Entry) error {
	recs := make([]diskstore.LogEntry, len(entries))
	for i, e := range entries {
		recs[i] = diskstore.LogEntry{Group: l.group, Term: e.GetTerm(), Index: e.GetIndex(), Type: uint8(e.GetType()), Data: e.GetData()}
	}
	var dhs *diskstore.HardState
	if hs != nil {
		dhs = &diskstore.HardState{Group: l.group, Term: hs.GetTerm(), Vote: hs.GetVote(), Commit: hs.GetCommit()}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(entries) > 0 {
		if first := entries[0].GetIndex(); first > l.lastLocked()+1 || first < l.first {
			return fmt.Errorf("group %d: entries from %d after a log holding %d..%d", l.group, first, l.first, l.lastLocked())
		}
	}
	lsns, hsLSN, err := l.st.AppendReplica(recs, dhs)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		l.truncateLocked(entries[0].GetIndex())
		for i, e := range entries {
			l.appendLocked(logEnt{term: e.GetTerm(), typ: e.GetType(), lsn: lsns[i], data: e.GetData(), size: len(e.GetData())})
		}
	}
	if hs != nil {
		l.hs = newHardState(hs.GetTerm(), hs.GetVote(), hs.GetCommit())
		l.hsLSN = hsLSN
	}
	return nil
}

// Sync implements replica.LogStorage.
func (l *raftLog) Sync() error { return l.st.SyncReplica() }

// SaveConfState implements replica.LogStorage: the store writes it with
// its next checkpoint.
func (l *raftLog) SaveConfState(cs *pb.ConfState) error {
	b, err := proto.Marshal(cs)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.cs = proto.Clone(cs).(*pb.ConfState)
	l.mu.Unlock()
	l.st.SetConfState(b)
	return nil
}

// Retain implements diskstore.RetainLog: the log drops what is applied
// and checkpointed, except what a follower behind still needs (at most
// maxKeep entries behind).
func (l *raftLog) Retain(applied, appliedTerm uint64) (uint64, uint64, wal.LSN) {
	cut := applied
	if l.need != nil {
		if n := l.need(); n > 0 && n-1 < cut {
			cut = n - 1
		}
	}
	if applied > l.maxKeep && cut < applied-l.maxKeep {
		cut = applied - l.maxKeep
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Keep keepBytes of entries at and below the applied one, and what
	// members behind need up to needFactor × keepBytes.
	var kept int64
	for i := min(applied, l.lastLocked()); i >= l.first && i > 0; i-- {
		if kept >= l.keepBytes && i <= cut {
			break
		}
		if kept < l.keepBytes {
			cut = min(cut, i-1)
		} else if kept+int64(l.ents[i-l.first].size)+16 > needFactor*l.keepBytes {
			cut = max(cut, i) // entry i and those before it: too far behind
			break
		}
		kept += int64(l.ents[i-l.first].size) + 16
	}
	if cut >= l.first {
		if cut > l.lastLocked() {
			cut = l.lastLocked()
		}
		l.compactLocked(cut, l.ents[cut-l.first].term)
	}
	keep := l.hsLSN
	if len(l.ents) > 0 && (keep == 0 || l.ents[0].lsn < keep) {
		keep = l.ents[0].lsn
	}
	return l.first - 1, l.snapTerm, keep
}

func newHardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(vote), Commit: proto.Uint64(commit)}
}
