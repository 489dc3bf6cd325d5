package diskstore

// A replicated store: the state machine of one replication group, whose
// Raft log is kept in the store's own WAL (doc.go, "Replicated mode").

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// Replication makes a store replicated (Options.Replication): the state
// machine of one Raft group whose log is the store's WAL.
type Replication struct {
	// Group is the group's id, nonzero. It is also the high 16 bits of
	// every message id the store hands out (group-scoped ids): two
	// groups' messages never share an id.
	Group uint64
	// Log is the group's Raft log: Open hands it the WAL's entries and
	// hard states, and each checkpoint asks it how much of itself it
	// still needs (Retain). Required.
	Log RetainLog
	// Wake, if set, is called after Apply queued a proposal for the
	// group's leader to take (TakeProposals). It runs on Apply's
	// goroutine, without the store's locks, and must not block.
	Wake func()
}

// RetainLog is a replicated store's Raft log.
type RetainLog interface {
	ReplicaLog
	// Retain is called by each checkpoint, before it commits, with the
	// last entry (and its term) whose changes the checkpoint makes
	// durable in the index: the log may drop the entries up to that
	// index that no member needs any more. It returns the index (and
	// term) of the last entry it dropped, or keeps, as a compaction
	// point (0, 0 for none), and the lowest WAL LSN holding a record it
	// still needs (an entry above the point, its latest hard state), or
	// 0 for none: the checkpoint removes no WAL file holding one.
	Retain(applied, appliedTerm uint64) (compacted, compactedTerm uint64, keep wal.LSN)
}

// idGroupShift is where a replicated store puts its group in a message
// id: 16 bits of group, 48 of count.
const idGroupShift = 48

// replState is a replicated store's own state.
type replState struct {
	// Under Store.mu:
	pos      uint64      // overlay changes applied; overlay.last is one of these
	open     *proposal   // the proposal Apply adds batches to; nil when none
	sealed   []*proposal // proposals closed and not yet taken
	inflight []*proposal // taken by the leader's loop, in order, not yet committed
	nextProp uint64      // the last proposal number given
	commits  chan struct{}
	conf     []byte // the group's membership as last applied (raftpb.ConfState)
	applied  uint64 // the last entry applied, and its term
	appliedT uint64

	// afterMu guards Store.afterGroup: completions run on the WAL's
	// goroutine and on the Raft loop's.
	afterMu sync.Mutex
}

// proposal is one Raft entry's worth of batches Apply made on the leader:
// each batch's record, length-prefixed, and its completion.
type proposal struct {
	num   uint64
	data  []byte
	dones []func(error)
}

// Proposal is what TakeProposals hands the leader's loop: one Raft entry's
// payload. Propose it as is; report its fate with Committed or Failed.
type Proposal struct {
	p *proposal
}

// Data returns the entry's payload (valid until the proposal is reported).
func (p Proposal) Data() []byte { return p.p.data }

// Batches returns how many store batches the proposal holds.
func (p Proposal) Batches() int { return len(p.p.dones) }

// replicated reports whether s is a replicated store.
func (s *Store) replicated() bool { return s.rep != nil }

// Group returns a replicated store's group, 0 for a single node's store.
func (s *Store) Group() uint64 {
	if s.rep == nil {
		return 0
	}
	return s.opts.Replication.Group
}

// applyReplicatedLocked is Apply in a replicated store for a batch that
// is not volatile only: its changes go to the active overlay now (the
// leader's memory is ahead of the log, as a single node's is ahead of the
// fsync) and its record into the open proposal; done runs once the entry
// holding it is committed (Committed) or could not be (Failed). Under mu.
func (s *Store) applyReplicatedLocked(b *store.Batch, fresh []*store.Message, done func(error)) {
	r := s.rep
	p := r.open
	if p == nil {
		r.nextProp++
		p = &proposal{num: r.nextProp}
		r.open = p
	}
	s.encBuf = encodeRecord(s.encBuf[:0], b, fresh)
	p.data = binary.AppendUvarint(p.data, uint64(len(s.encBuf)))
	p.data = append(p.data, s.encBuf...)
	n := len(s.encBuf)
	if cap(s.encBuf) > 1<<20 {
		s.encBuf = nil
	}
	p.dones = append(p.dones, done)
	r.pos++
	s.active.apply(b, fresh, r.pos)
	s.active.lastProp = p.num
	s.spaceAppended(n)
}

// TakeProposals seals the batches Apply queued since the last call into
// proposals and hands them over, oldest first: the leader's loop proposes
// each as one Raft entry, in order, and reports each one's fate, in the
// same order, with Committed or Failed.
func (s *Store) TakeProposals(dst []Proposal) []Proposal {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rep
	r.sealLocked()
	for _, p := range r.sealed {
		dst = append(dst, Proposal{p})
		r.inflight = append(r.inflight, p)
	}
	clear(r.sealed)
	r.sealed = r.sealed[:0]
	return dst
}

func (r *replState) sealLocked() {
	if r.open != nil {
		r.sealed = append(r.sealed, r.open)
		r.open = nil
	}
}

// Committed reports that the oldest proposal taken is committed, as entry
// index of term: its batches' completions run (AfterGroup hooks wait for
// EndGroup). Call it from the loop that applies committed entries, in log
// order.
func (s *Store) Committed(index, term uint64) error {
	s.mu.Lock()
	r := s.rep
	if len(r.inflight) == 0 {
		s.mu.Unlock()
		return errors.New("diskstore: a commit reported for no proposal")
	}
	p := r.inflight[0]
	r.inflight[0] = nil
	r.inflight = r.inflight[1:]
	// The frozen overlay, if it holds p's batches, is the group's state
	// as of index once p is its last proposal to commit. The active one
	// is too, if it holds no proposal after p; if it does, the commit of
	// its last one sets it again before a checkpoint may write it.
	if f := s.frozen; f != nil && p.num <= f.lastProp {
		f.applied, f.appliedTerm = index, term
	}
	s.active.applied, s.active.appliedTerm = index, term
	r.applied, r.appliedT = index, term
	r.notifyLocked()
	s.mu.Unlock()
	for _, done := range p.dones {
		if done != nil {
			done(nil)
		}
	}
	return nil
}

// Failed reports that the proposals taken and not committed, and those
// queued, will not be (leadership lost, the proposal refused): the store
// fails with err (its overlay holds changes the group may never commit),
// and their completions run with err. The owner then abandons the store
// and opens it again (Abandon).
func (s *Store) Failed(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		if !errors.Is(err, store.ErrClosed) {
			s.log.Warn("store: proposals failed; no further changes are accepted until it is opened again", "err", err)
		}
		close(s.cpDone)
		s.cpDone = make(chan struct{})
	}
	r := s.rep
	r.sealLocked()
	ps := append(r.inflight, r.sealed...)
	r.inflight, r.sealed = nil, nil
	r.notifyLocked()
	s.mu.Unlock()
	for _, p := range ps {
		for _, done := range p.dones {
			if done != nil {
				done(err)
			}
		}
	}
}

func (r *replState) notifyLocked() {
	close(r.commits)
	r.commits = make(chan struct{})
}

// ApplyEntry applies entry index (of term) of the group, committed, whose
// payload is data: a proposal another member made, or this one before it
// last opened the store. Its batches' changes go to the active overlay;
// changes to volatile queues are left out (they are the proposer's own).
// data is not kept.
func (s *Store) ApplyEntry(index, term uint64, data []byte) error {
	var batches []*store.Batch
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return fmt.Errorf("diskstore: entry %d: a record length %d in %d bytes: %w", index, n, len(data), errCorrupt)
		}
		r, err := decodeWALRecord(data[k : k+int(n)])
		if err != nil {
			return fmt.Errorf("diskstore: entry %d: %w", index, err)
		}
		if r.batch == nil || r.kind != kindLocal {
			return fmt.Errorf("diskstore: entry %d: a %s record in an entry: %w", index, kindName(r.kind), errCorrupt)
		}
		batches = append(batches, r.batch)
		data = data[k+int(n):]
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	for _, b := range batches {
		s.noteIDs(b)
		withoutVolatile(b)
		s.rep.pos++
		s.active.apply(b, b.Messages, s.rep.pos)
	}
	s.markAppliedLocked(index, term)
	full := s.active.bytes >= s.opts.CheckpointBytes
	s.mu.Unlock()
	if full {
		// A follower's overlay fills as a leader's does: checkpoint it,
		// or it holds the whole stream in memory and a restart applies
		// it all again.
		s.wake()
	}
	return nil
}

// MarkApplied records that entry index (of term), applied, changed
// nothing in the store: a new leader's empty entry, a membership change.
func (s *Store) MarkApplied(index, term uint64) {
	s.mu.Lock()
	s.markAppliedLocked(index, term)
	s.mu.Unlock()
}

func (s *Store) markAppliedLocked(index, term uint64) {
	r := s.rep
	r.applied, r.appliedT = index, term
	// The active overlay's state is the group's as of index only if no
	// proposal of its is still to commit (a leader's are all after it).
	if len(r.inflight) == 0 && r.open == nil && len(r.sealed) == 0 {
		s.active.applied, s.active.appliedTerm = index, term
	}
	r.notifyLocked()
}

// SetConfState records the group's membership as of the last entry
// applied (etcd raft's raftpb.ConfState, encoded): the next checkpoint
// writes it with the applied index.
func (s *Store) SetConfState(cs []byte) {
	s.mu.Lock()
	s.rep.conf = slices.Clone(cs)
	s.active.conf = s.rep.conf
	s.mu.Unlock()
}

// Applied returns the last entry the store applied and its term.
func (s *Store) Applied() (index, term uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rep.applied, s.rep.appliedT
}

// GroupState returns the group's state as the index holds it (as of the
// last checkpoint, or Open), and the membership last applied.
func (s *Store) GroupState() (index.GroupState, error) {
	var gs index.GroupState
	v, closer, err := s.db.Get(index.GroupStateKey(nil, s.opts.Replication.Group))
	if errors.Is(err, pebble.ErrNotFound) {
		return gs, nil
	}
	if err != nil {
		return gs, fmt.Errorf("read group state: %w", err)
	}
	defer closer.Close()
	if err := index.DecodeGroupState(slices.Clone(v), &gs); err != nil {
		return gs, fmt.Errorf("read group state: %w", err)
	}
	return gs, nil
}

// AppendReplica appends the group's Raft records, entries then the hard
// state (nil: unchanged), to the WAL without waiting, and returns each
// entry's LSN and the hard state's (0 when nil). They are durable once
// SyncReplica returns.
func (s *Store) AppendReplica(ents []LogEntry, hs *HardState) (lsns []wal.LSN, hsLSN wal.LSN, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only a closed store refuses: one that failed because its proposals
	// did (Failed) keeps its group's log going until it is reopened; a
	// WAL failure fails the WAL's own Sync.
	if s.closed {
		return nil, 0, store.ErrClosed
	}
	for i := range ents {
		s.encBuf = encodeEntry(s.encBuf[:0], &ents[i])
		s.dones.push(nil)
		lsns = append(lsns, s.wal.Append(s.encBuf, wal.Durable, s.walDone))
		s.spaceAppended(len(s.encBuf))
	}
	if hs != nil {
		s.encBuf = encodeHardState(s.encBuf[:0], hs)
		s.dones.push(nil)
		hsLSN = s.wal.Append(s.encBuf, wal.Durable, s.walDone)
	}
	if cap(s.encBuf) > 1<<20 {
		s.encBuf = nil
	}
	return lsns, hsLSN, nil
}

// SyncReplica returns once every record AppendReplica appended before the
// call is durable.
func (s *Store) SyncReplica() error {
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("sync wal: %w", err)
	}
	return nil
}

// ReadReplica reads back the entry AppendReplica (or a replay) put at lsn.
func (s *Store) ReadReplica(lsn wal.LSN) (LogEntry, error) {
	rec, _, err := s.wal.ReadAt(lsn, nil)
	if err != nil {
		return LogEntry{}, fmt.Errorf("read wal record %d: %w", lsn, err)
	}
	r, err := decodeWALRecord(rec)
	if err != nil {
		return LogEntry{}, fmt.Errorf("read wal record %d: %w", lsn, err)
	}
	if r.kind != kindEntry {
		return LogEntry{}, fmt.Errorf("read wal record %d: a %s record, not an entry: %w", lsn, kindName(r.kind), errCorrupt)
	}
	return r.entry, nil
}

// noteIDs raises the id counter past b's message ids. Under mu (or in
// recovery).
func (s *Store) noteIDs(b *store.Batch) {
	for _, m := range b.Messages {
		if uint64(m.ID) > s.nextID.Load() {
			s.nextID.Store(uint64(m.ID))
		}
	}
	for i := range b.Puts {
		if id := uint64(b.Puts[i].Msg.ID); id > s.nextID.Load() {
			s.nextID.Store(id)
		}
	}
}

// awaitCommitted waits until the proposals up to num are committed. It
// returns false if they never will be here: the store failed or is
// closing.
func (s *Store) awaitCommitted(num uint64) bool {
	for {
		s.mu.Lock()
		r := s.rep
		if s.err != nil {
			s.mu.Unlock()
			return false
		}
		pending := r.open != nil && r.open.num <= num || len(r.sealed) > 0 && r.sealed[0].num <= num ||
			len(r.inflight) > 0 && r.inflight[0].num <= num
		if !pending {
			s.mu.Unlock()
			return true
		}
		ch := r.commits
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.stop:
			return false
		}
	}
}

// Abandon closes the store without a checkpoint: what its overlay holds
// beyond the index is dropped, as a crash would drop it, and Open finds
// the store as of its last checkpoint and its WAL. A replicated store's
// owner calls it when the store's overlay may hold changes its group will
// never commit (leadership lost); Open then recovers the committed state.
// Completions not run yet run with store.ErrClosed.
func (s *Store) Abandon() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if !s.beginClose() {
		return s.closeErr
	}
	if s.rep != nil {
		s.Failed(store.ErrClosed)
	}
	s.checkpointEnded()
	close(s.stop)
	<-s.space.stopped
	s.wal.Close()
	<-s.stopped
	// cpMu: a snapshot being made (CreateSnapshot) finishes first.
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.closeErr = errors.Join(s.segs.Close(), s.db.Close())
	return s.closeErr
}
