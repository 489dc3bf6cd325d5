package cluster

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/brokerd/brokerd/store"
)

// snapKeep is the log the snapshot tests keep: small enough that a few
// thousand batches take the leader's compaction point past a stopped node.
const snapKeep = 8 << 10

// behind stops follower i (not the leader l), publishes n batches through
// l from seq from, and checkpoints l until its log no longer holds what i
// needs: i can only catch up from a snapshot. It returns the batches'
// total.
func (tc *testCluster) behind(l servingNode, i int, q store.QueueID, from uint64, n int) {
	tc.t.Helper()
	_, last := tc.nodes[i].logBounds()
	tc.nodes[i].Close()
	tc.nodes[i] = nil
	publish(tc.t, l.st, q, from, n)
	if err := l.st.Checkpoint(); err != nil {
		tc.t.Fatal(err)
	}
	if first, _ := tc.nodes[tc.index(l.name)].logBounds(); first <= last+1 {
		tc.t.Fatalf("the leader's log starts at %d: not compacted past the stopped node's last entry %d", first, last)
	}
}

// logBounds returns the first and last index of the node's log.
func (c *Node) logBounds() (first, last uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, _ = c.cur.rlog.FirstIndex()
	last, _ = c.cur.rlog.LastIndex()
	return first, last
}

// A node stopped while the leader's log moves on past what it keeps
// catches up, once restarted, from a snapshot of the leader's store (one
// made, sent and installed), and then from the log: its store reads every
// batch.
func TestClusterSnapshotCatchUp(t *testing.T) {
	tc := newTestClusterKeeping(t, snapKeep)
	const q = store.QueueID(3)
	l := tc.leader()
	publish(t, l.st, q, 1, 20)
	for i := range tc.names {
		tc.awaitApplied(i, q, 20)
	}
	f := (tc.index(l.name) + 1) % 3
	tc.behind(l, f, q, 21, 3000)

	tc.start(f)
	tc.awaitApplied(f, q, 3020)
	publish(t, l.st, q, 3021, 100)
	for i := range tc.names {
		tc.awaitApplied(i, q, 3120)
	}
	ls, fs := tc.nodes[tc.index(l.name)].Stats(), tc.nodes[f].Stats()
	if ls.SnapshotsCreated == 0 || ls.SnapshotsSent == 0 || fs.SnapshotsInstalled != 1 {
		t.Fatalf("leader %+v, follower %+v: want a snapshot made, sent and installed once", ls, fs)
	}
	// Restarted once more, it needs nothing but its own store.
	tc.nodes[f].Close()
	tc.start(f)
	tc.awaitApplied(f, q, 3120)
	if s := tc.nodes[f].Stats(); s.SnapshotsInstalled != 0 {
		t.Fatalf("a restart after the install installed another: %+v", s)
	}
}

// A node whose data directory is wiped (a replaced disk) rejoins under
// its name with an empty one and catches up from a snapshot.
func TestClusterSnapshotWipedDir(t *testing.T) {
	tc := newTestClusterKeeping(t, snapKeep)
	const q = store.QueueID(4)
	l := tc.leader()
	publish(t, l.st, q, 1, 20)
	for i := range tc.names {
		tc.awaitApplied(i, q, 20)
	}
	f := (tc.index(l.name) + 1) % 3
	tc.behind(l, f, q, 21, 3000)
	if err := os.RemoveAll(tc.dirs[f]); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(tc.dirs[f], 0o755); err != nil {
		t.Fatal(err)
	}
	tc.start(f)
	tc.awaitApplied(f, q, 3020)
	if s := tc.nodes[f].Stats(); s.SnapshotsInstalled != 1 {
		t.Fatalf("the wiped node: %+v, want one snapshot installed", s)
	}
	publish(t, l.st, q, 3021, 50)
	tc.awaitApplied(f, q, 3070)
}

// A snapshot fetch cut off (the follower closed mid-transfer) is tried
// again when the follower comes back, and succeeds.
func TestClusterSnapshotInterrupted(t *testing.T) {
	var calls atomic.Int64
	started := make(chan struct{})
	fetchHook = func(ctx context.Context, name string) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done() // until the node closes
		}
	}
	t.Cleanup(func() { fetchHook = nil }) // after the cluster's cleanup
	tc := newTestClusterKeeping(t, snapKeep)
	const q = store.QueueID(5)
	l := tc.leader()
	publish(t, l.st, q, 1, 20)
	for i := range tc.names {
		tc.awaitApplied(i, q, 20)
	}
	f := (tc.index(l.name) + 1) % 3
	tc.behind(l, f, q, 21, 3000)
	tc.start(f)
	<-started // the first file is in, the rest waits
	s := tc.nodes[f].Stats()
	tc.nodes[f].Close()
	if s.SnapshotsInstalled != 0 {
		t.Fatalf("installed before the fetch ended: %+v", s)
	}
	tc.start(f)
	tc.awaitApplied(f, q, 3020)
	if s := tc.nodes[f].Stats(); s.SnapshotsInstalled != 1 {
		t.Fatalf("after the restart: %+v, want one snapshot installed", s)
	}
}
