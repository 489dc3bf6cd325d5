package cluster

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/brokerd/brokerd/internal/fsutil"
)

// A member that starts with an empty log — a new node, or one whose data
// directory was replaced — may, in the second case, have acknowledged
// entries that were counted in their commit, and voted in the current
// term; it now holds neither. Granting its vote before it holds what the
// group had committed could elect a leader lacking committed entries (the
// wiped member and a member that is behind make a majority) or a second
// leader of a term. So such a member is catching up, and votes only for a
// candidate whose log holds nothing past the bootstrap entries (as when a
// new cluster elects its first leader), until it holds them:
//
//   - The first append a leader sends it tells it the leader's commit
//     index (the target): everything committed before this data directory
//     existed is at or below it. The target is written to the mark before
//     raft sees the append, so before the member acknowledges anything
//     (an append whose target cannot be written is dropped), and the
//     member has caught up once its commit index reaches it.
//   - A snapshot raft sends is dropped while the target is unknown (the
//     leader sends an append next). A snapshot the member pulls on a
//     heartbeat (lostLog) is at or after the heartbeat's commit, which is
//     at least every committed entry the leader saw the member acknowledge.
//   - So a log past the bootstrap entries with no target came from that
//     snapshot, or from leading (a leader won a majority's votes with the
//     most up-to-date log): caught up as well.
//
// The mark is a file in the data directory (catchUpFile), made before the
// member bootstraps and removed once it has caught up; the state is read
// from the mark and the log at every opening, so a restart decides alone.
// The price: a group with one member down and another catching up elects
// no leader until either is back. (The leader's commit as first told can
// lag the group's true one only while a new leader has not yet committed
// an entry of its term: the wipe would then be a second fault.)
type catchUp struct {
	mu sync.Mutex // orders the target's write to the mark
	// on while the mark is on disk; target is the commit index to reach
	// (0: no leader's append heard yet).
	on     atomic.Bool
	target atomic.Uint64
	// lastWithheld is when withholdVote last logged (unix nanoseconds).
	lastWithheld atomic.Int64
}

// catchUpFile marks a member catching up; it holds the target, once
// known, as 8 bytes big-endian.
const catchUpFile = "CATCHING-UP"

// storeFS is the filesystem the store is on.
func (c *Node) storeFS() vfs.FS {
	if c.cfg.Store.FS != nil {
		return c.cfg.Store.FS
	}
	return vfs.Default
}

// markCatchingUp records, before the member bootstraps an empty log, that
// it is catching up.
func (c *Node) markCatchingUp() error {
	if err := writeSynced(c.storeFS(), filepath.Join(c.cfg.Dir, catchUpFile), nil); err != nil {
		return err
	}
	if err := fsutil.SyncDir(c.storeFS(), c.cfg.Dir); err != nil {
		return err
	}
	c.catchUp.target.Store(0)
	c.catchUp.on.Store(true)
	return nil
}

// loadCatchingUp reads the mark (open, of a member with a log). A mark
// whose target is torn counts as one with none.
func (c *Node) loadCatchingUp() error {
	b, err := readAll(c.storeFS(), filepath.Join(c.cfg.Dir, catchUpFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.catchUp.on.Store(false)
		return nil
	case err != nil:
		return err
	}
	var target uint64
	if len(b) == 8 {
		target = binary.BigEndian.Uint64(b)
	}
	c.catchUp.target.Store(target)
	c.catchUp.on.Store(true)
	return nil
}

// heardLeader is the transport handler's look at a data group message
// before raft sees it, while catching up with no target: the first
// append from a leader sets the target and writes it to the mark; a
// snapshot is dropped until then. It reports whether it took (dropped)
// the message: an append whose target could not be written is dropped
// too (the leader sends it again).
func (c *Node) heardLeader(m *pb.Message) bool {
	cu := &c.catchUp
	t := m.GetType()
	if t != pb.MsgApp && t != pb.MsgSnap || !cu.on.Load() || cu.target.Load() != 0 {
		return false
	}
	if t == pb.MsgSnap {
		return true
	}
	cu.mu.Lock()
	defer cu.mu.Unlock()
	if cu.target.Load() != 0 || !cu.on.Load() {
		return false
	}
	b := binary.BigEndian.AppendUint64(nil, m.GetCommit())
	if err := writeSynced(c.storeFS(), filepath.Join(c.cfg.Dir, catchUpFile), b); err != nil {
		c.log.Warn("cluster: write the catching-up mark", "err", err)
		return true
	}
	cu.target.Store(m.GetCommit())
	c.log.Info("cluster: catching up with the leader's log", "leader", c.nameOf(m.GetFrom()), "commit", m.GetCommit())
	return false
}

// checkCaughtUp ends catching up once inc's log holds what it must (at
// open, and after each of the loop's cycles): the mark is removed and the
// member votes again.
func (c *Node) checkCaughtUp(inc *incarnation) {
	cu := &c.catchUp
	if !cu.on.Load() {
		return
	}
	last, _ := inc.rlog.LastIndex()
	hs, _, _ := inc.rlog.InitialState()
	if target := cu.target.Load(); last <= uint64(len(c.cfg.Peers)) || target > 0 && hs.GetCommit() < target {
		return
	}
	cu.mu.Lock()
	defer cu.mu.Unlock()
	err := c.storeFS().Remove(filepath.Join(c.cfg.Dir, catchUpFile))
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = fsutil.SyncDir(c.storeFS(), c.cfg.Dir)
	}
	if err != nil {
		c.log.Warn("cluster: remove the catching-up mark", "err", err)
		return
	}
	cu.on.Store(false)
	c.log.Info("cluster: caught up with the leader's log; this node votes again", "commit", hs.GetCommit(), "last_index", last)
}

// withholdVote is the transport handler's look at a vote request (and a
// pre-vote) for the data group: while catching up, the member votes only
// for a candidate whose log holds nothing past the bootstrap entries. It
// reports whether it took (dropped) the message.
func (c *Node) withholdVote(m *pb.Message) bool {
	if t := m.GetType(); t != pb.MsgVote && t != pb.MsgPreVote || !c.catchUp.on.Load() {
		return false
	}
	if m.GetIndex() <= uint64(len(c.cfg.Peers)) {
		return false
	}
	now, cu := time.Now().UnixNano(), &c.catchUp
	if prev := cu.lastWithheld.Load(); now-prev > int64(time.Second) && cu.lastWithheld.CompareAndSwap(prev, now) {
		c.log.Warn("cluster: vote withheld: this node started with an empty log (a new node, or its data directory was replaced) and has not caught up with a leader's log", "candidate", c.nameOf(m.GetFrom()), "candidate_last_index", m.GetIndex())
	}
	return true
}
