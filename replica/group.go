package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrNotLeader is Propose's error on a node that does not lead its group.
var ErrNotLeader = errors.New("replica: not the group's leader")

// ErrLeadershipLost is a proposal's done error when its node stopped
// leading (or its term passed) before the proposal applied: it may or may
// not commit later, under another leader.
var ErrLeadershipLost = errors.New("replica: leadership lost before the proposal applied")

// LogStorage is a group's Raft log as this node keeps it: etcd raft's
// Storage (what raft reads back) and its writes. Save writes a Ready's
// hard state and entries: it appends entries after discarding every
// stored entry whose index is at or above the first new one (Raft's
// suffix rule); they are durable once Sync returns, and messages that
// depend on them are sent only after. Several groups' storages may share
// one log, whose one Sync covers them all (a Node syncs once per cycle).
// SaveConfState records the membership an applied change left, which
// InitialState returns after a restart (with Config.Applied, raft does not
// hand applied changes back).
type LogStorage interface {
	raft.Storage
	Save(hs *pb.HardState, entries []*pb.Entry) error
	Sync() error
	SaveConfState(cs *pb.ConfState) error
}

// Transport sends a group's messages to its peers. Send must not block on
// the network and may drop messages (Raft retransmits).
type Transport interface {
	Send(msgs []*pb.Message)
}

// Config configures a Group.
type Config struct {
	// ID is this member's Raft id (never 0, never reused); Peers are every
	// member's, this one's included, for a group started empty.
	ID    uint64
	Peers []uint64
	// ElectionTick and HeartbeatTick are in Ticks (etcd raft's meaning).
	ElectionTick, HeartbeatTick int
	// DisableCheckQuorum turns off etcd raft's CheckQuorum (a leader
	// steps down when it has not heard from a quorum for an election
	// timeout, and a member that heard from a leader refuses votes
	// meanwhile). Only for a simulation that runs elections itself with
	// Campaign, raft's election timeouts being drawn from crypto/rand
	// (see group_test.go); a cluster keeps it on.
	DisableCheckQuorum bool
	Storage            LogStorage
	Transport          Transport
	// Apply applies a committed proposal's payload, in log order, once
	// per member. It must not keep payload after it returns.
	Apply func(index uint64, payload []byte)
	// Applied, if set, is called instead of Apply for every committed
	// entry, in log order, with its index and term: payload is the
	// proposal's (nil for an entry that carries none: a new leader's
	// empty entry, a membership change, a fenced proposal), and own says
	// it is one this member proposed and is still waiting for (its done
	// runs right after). A state machine that applied its own proposals
	// ahead of the log (a leader's memory) applies only the others.
	Applied func(index, term uint64, payload []byte, own bool)
	// Logger receives etcd raft's log lines; nil discards them.
	Logger raft.Logger
	// Confirmed, if set, is called with the context of each
	// ConfirmLeadership request a quorum answered, on the group's
	// goroutine, in the order asked.
	Confirmed func(ctx []byte)
}

// Stats count what a group did.
type Stats struct {
	Proposed, Confirmed, Failed uint64 // this member's proposals
	Applied                     uint64 // entries applied (proposals of any member)
	Fenced                      uint64 // applied entries dropped for a sequence gap
}

// Group is one member of a Raft group. Its methods are called from one
// goroutine (see the package doc); it takes no lock.
type Group struct {
	cfg Config
	rn  *raft.RawNode

	lead, term uint64 // as last seen in a Ready
	vote       uint64 // the hard state's, as last saved
	// seq is the last sequence number this member gave a proposal in
	// term propTerm; pending are those not applied yet.
	propTerm, seq uint64
	pending       map[uint64]func(error)
	// The fencing of applied entries: the term of the last applied
	// proposal and its sequence number.
	appliedTerm, appliedSeq uint64
	stats                   Stats
}

// NewGroup starts a member whose storage is empty: the group is created
// with cfg.Peers as its voters.
func NewGroup(cfg Config) (*Group, error) {
	rn, err := newRawNode(cfg, 0)
	if err != nil {
		return nil, err
	}
	peers := make([]raft.Peer, len(cfg.Peers))
	for i, id := range cfg.Peers {
		peers[i] = raft.Peer{ID: id}
	}
	if err := rn.Bootstrap(peers); err != nil {
		return nil, fmt.Errorf("replica: bootstrap group member %d: %w", cfg.ID, err)
	}
	return &Group{cfg: cfg, rn: rn, pending: map[uint64]func(error){}}, nil
}

// RestartGroup starts a member again from what its storage holds (its
// hard state, membership and log) after a stop or a crash. applied is the
// index of the last entry its state machine applied: the committed
// entries after it are applied again, in order. The fencing of applied
// entries continues from the proposal at applied, read back from the log.
func RestartGroup(cfg Config, applied uint64) (*Group, error) {
	rn, err := newRawNode(cfg, applied)
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg, rn: rn, pending: map[uint64]func(error){}}
	if hs, _, err := cfg.Storage.InitialState(); err == nil {
		g.term, g.vote = hs.GetTerm(), hs.GetVote()
	}
	// The fencing state: the last applied proposal's (term, seq), or the
	// latest proposal before it (a leader's empty entry or a membership
	// change carries none).
	first, err := cfg.Storage.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("replica: restart group member %d: %w", cfg.ID, err)
	}
	for i := applied; i >= first && i > 0; i-- {
		ents, err := cfg.Storage.Entries(i, i+1, 1<<30)
		if err != nil {
			return nil, fmt.Errorf("replica: restart group member %d: entry %d: %w", cfg.ID, i, err)
		}
		if e := ents[0]; e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
			if g.appliedTerm, g.appliedSeq, _, err = decodeProposal(e.GetData()); err != nil {
				return nil, fmt.Errorf("replica: restart group member %d: entry %d: %w", cfg.ID, i, err)
			}
			break
		}
	}
	return g, nil
}

func newRawNode(cfg Config, applied uint64) (*raft.RawNode, error) {
	if cfg.Apply == nil && cfg.Applied == nil || cfg.Storage == nil || cfg.Transport == nil {
		return nil, errors.New("replica: a group needs Storage, Transport and Apply (or Applied)")
	}
	rc := &raft.Config{
		Applied:         applied,
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTick,
		HeartbeatTick:   cfg.HeartbeatTick,
		Storage:         cfg.Storage,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		CheckQuorum:     !cfg.DisableCheckQuorum,
		PreVote:         true,
		Logger:          cfg.Logger,
	}
	if rc.Logger == nil {
		rc.Logger = discardLogger{}
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("replica: start group member %d: %w", cfg.ID, err)
	}
	return rn, nil
}

// Tick advances the group's logical clock by one tick.
func (g *Group) Tick() { g.rn.Tick() }

// Campaign makes this member start an election now.
func (g *Group) Campaign() error { return g.rn.Campaign() }

// Step hands the group a message from a peer.
func (g *Group) Step(m *pb.Message) error { return g.rn.Step(m) }

// ReportUnreachable tells raft that a message to member id could not be
// delivered (the transport's report), so it probes that member rather
// than stream appends to it.
func (g *Group) ReportUnreachable(id uint64) { g.rn.ReportUnreachable(id) }

// ReportSnapshot tells raft how sending a snapshot to member id ended.
func (g *Group) ReportSnapshot(id uint64, delivered bool) {
	status := raft.SnapshotFinish
	if !delivered {
		status = raft.SnapshotFailure
	}
	g.rn.ReportSnapshot(id, status)
}

// ConfirmLeadership asks the members whether this member still leads the
// group: a heartbeat carrying ctx goes to each, and once a quorum has
// answered it in this member's term, Config.Confirmed gets ctx (etcd
// raft's read index, ReadOnlySafe). A quorum answered a message sent after
// this call, so no other leader could have been elected before the call
// plus the time its members wait before they vote for another (the
// leader's lease built on it: package cluster). No answer comes if this
// member does not lead, or stops leading first; none before it has
// committed an entry of its term.
func (g *Group) ConfirmLeadership(ctx []byte) { g.rn.ReadIndex(ctx) }

// Leader returns the member the group last knew as leader (0: none) and
// the term.
func (g *Group) Leader() (lead, term uint64) { return g.lead, g.term }

// Status returns etcd raft's view of the group: its state, indexes and,
// on a leader, each member's progress.
func (g *Group) Status() raft.Status { return g.rn.Status() }

// ID returns this member's Raft id.
func (g *Group) ID() uint64 { return g.cfg.ID }

// Stats returns the group's counters.
func (g *Group) Stats() Stats { return g.stats }

// Propose proposes payload (copied) and arranges for done to run once it
// has applied here (nil) or its confirmation became impossible
// (ErrLeadershipLost). It fails at once with ErrNotLeader on a member that
// does not lead the group, and with raft's error if raft refused the
// proposal (then done never runs).
func (g *Group) Propose(payload []byte, done func(error)) error {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return ErrNotLeader
	}
	if term := st.HardState.GetTerm(); term != g.propTerm {
		g.propTerm, g.seq = term, 0
	}
	data := appendProposal(nil, g.propTerm, g.seq+1, payload)
	if err := g.rn.Propose(data); err != nil {
		return fmt.Errorf("replica: propose: %w", err)
	}
	g.seq++
	g.pending[g.seq] = done
	g.stats.Proposed++
	return nil
}

// Process handles what the group has ready, if anything, and reports
// whether it did: it saves, sends, applies and advances.
func (g *Group) Process() (bool, error) {
	rd, ok, err := g.save()
	if !ok || err != nil {
		return ok, err
	}
	if err := g.cfg.Storage.Sync(); err != nil {
		return true, fmt.Errorf("replica: sync group member %d's log: %w", g.cfg.ID, err)
	}
	return true, g.finish(rd)
}

// save takes what the group has ready, if anything, and writes its hard
// state and entries (Save); they are durable once the storage syncs.
func (g *Group) save() (raft.Ready, bool, error) {
	if !g.rn.HasReady() {
		return raft.Ready{}, false, nil
	}
	rd := g.rn.Ready()
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		// Snapshots are installed out of band, by the owner, before raft
		// sees them (package cluster): one raft took itself would move
		// the log past a state machine that has none of it.
		return rd, true, fmt.Errorf("replica: group member %d: raft took a snapshot (index %d) its owner did not install", g.cfg.ID, rd.Snapshot.GetMetadata().GetIndex())
	}
	if rd.SoftState != nil {
		g.lead = rd.SoftState.Lead
	}
	var hs *pb.HardState // to save: nil when unchanged
	prevTerm, prevVote := g.term, g.vote
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		hs = rd.HardState
		g.term, g.vote = hs.GetTerm(), hs.GetVote()
	}
	// Leadership lost, or a new term: what this member proposed before can
	// no longer be confirmed by it.
	if len(g.pending) > 0 && (g.lead != g.cfg.ID || g.term != g.propTerm) {
		g.failPending()
	}
	if hs != nil || len(rd.Entries) > 0 {
		if err := g.cfg.Storage.Save(hs, rd.Entries); err != nil {
			return rd, true, fmt.Errorf("replica: save group member %d's log: %w", g.cfg.ID, err)
		}
	}
	// A leader sends its appends while its own write of the same entries
	// is under way (the Raft thesis, 10.2.1; etcd does the same): its own
	// acknowledgement counts toward the commit only after the sync (raft
	// delivers it at Advance). Not when its term or vote changed in this
	// Ready: no message goes out before those are durable.
	if g.lead == g.cfg.ID && len(rd.Messages) > 0 && g.term == prevTerm && g.vote == prevVote {
		g.cfg.Transport.Send(rd.Messages)
		rd.Messages = nil
	}
	return rd, true, nil
}

// finish does the rest of a Ready once its writes are durable: it sends
// the messages, applies the committed entries and advances.
func (g *Group) finish(rd raft.Ready) error {
	if len(rd.Messages) > 0 {
		g.cfg.Transport.Send(rd.Messages)
	}
	if g.cfg.Confirmed != nil {
		for _, rs := range rd.ReadStates {
			g.cfg.Confirmed(rs.RequestCtx)
		}
	}
	for _, e := range rd.CommittedEntries {
		if err := g.apply(e); err != nil {
			return err
		}
	}
	g.rn.Advance(rd)
	return nil
}

// apply applies one committed entry.
func (g *Group) apply(e *pb.Entry) error {
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: entry %d: membership change: %w", e.GetIndex(), err)
		}
		if err := g.saveConfState(e, g.rn.ApplyConfChange(&cc)); err != nil {
			return err
		}
		g.skipped(e)
		return nil
	case pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: entry %d: membership change: %w", e.GetIndex(), err)
		}
		if err := g.saveConfState(e, g.rn.ApplyConfChange(&cc)); err != nil {
			return err
		}
		g.skipped(e)
		return nil
	}
	if len(e.GetData()) == 0 {
		g.skipped(e) // a new leader's empty entry
		return nil
	}
	term, seq, payload, err := decodeProposal(e.GetData())
	if err != nil {
		return fmt.Errorf("replica: entry %d: %w", e.GetIndex(), err)
	}
	if term != g.appliedTerm {
		g.appliedTerm, g.appliedSeq = term, 0
	}
	if seq != g.appliedSeq+1 {
		// A gap: see the package doc. Nothing of this term applies
		// after it; its proposer's waiter learns it.
		g.stats.Fenced++
		g.skipped(e)
		g.settle(term, seq, ErrLeadershipLost)
		return nil
	}
	g.appliedSeq = seq
	if g.cfg.Applied != nil {
		_, own := g.pending[seq]
		g.cfg.Applied(e.GetIndex(), e.GetTerm(), payload, own && term == g.propTerm)
	} else {
		g.cfg.Apply(e.GetIndex(), payload)
	}
	g.stats.Applied++
	g.settle(term, seq, nil)
	return nil
}

// skipped tells Config.Applied of an entry that carries no proposal to
// apply.
func (g *Group) skipped(e *pb.Entry) {
	if g.cfg.Applied != nil {
		g.cfg.Applied(e.GetIndex(), e.GetTerm(), nil, false)
	}
}

func (g *Group) saveConfState(e *pb.Entry, cs *pb.ConfState) error {
	if err := g.cfg.Storage.SaveConfState(cs); err != nil {
		return fmt.Errorf("replica: entry %d: save membership: %w", e.GetIndex(), err)
	}
	return nil
}

// settle runs the waiter of this member's proposal (term, seq), if any.
func (g *Group) settle(term, seq uint64, err error) {
	if term != g.propTerm {
		return
	}
	done, ok := g.pending[seq]
	if !ok {
		return
	}
	delete(g.pending, seq)
	if err != nil {
		g.stats.Failed++
	} else {
		g.stats.Confirmed++
	}
	if done != nil {
		done(err)
	}
}

// failPending fails every proposal not applied yet.
func (g *Group) failPending() { g.failPendingWith(ErrLeadershipLost) }

func (g *Group) failPendingWith(err error) {
	pending := g.pending
	g.pending = map[uint64]func(error){}
	for _, done := range pending {
		g.stats.Failed++
		if done != nil {
			done(err)
		}
	}
}

// discardLogger drops etcd raft's log lines.
type discardLogger struct{}

func (discardLogger) Debug(...any)            {}
func (discardLogger) Debugf(string, ...any)   {}
func (discardLogger) Error(...any)            {}
func (discardLogger) Errorf(string, ...any)   {}
func (discardLogger) Info(...any)             {}
func (discardLogger) Infof(string, ...any)    {}
func (discardLogger) Warning(...any)          {}
func (discardLogger) Warningf(string, ...any) {}
func (discardLogger) Fatal(v ...any)          { panic(fmt.Sprint(v...)) }
func (discardLogger) Fatalf(f string, v ...any) {
	panic(fmt.Sprintf(f, v...))
}
func (discardLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (discardLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
