package cluster

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	snapLinger = 0
	t.Cleanup(func() { snapLinger = time.Minute })
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
	// No member needs the snapshots any more: they go (their links hold
	// segment files the store removed).
	dir := filepath.Join(tc.dirs[tc.index(l.name)], snapDirName)
	for deadline := time.Now().Add(waitFor); ; {
		if time.Now().After(deadline) {
			t.Fatalf("the leader's snapshots are still there")
		}
		names, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polls the leader's directory
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
		// Under a loaded machine (20 ms ticks) the leadership may have
		// moved to the other follower, whose log still holds what the
		// node lacks: it catches up from that log, rightly.
		if lead := tc.nodes[f].Status().LeaderName; lead == l.name {
			t.Fatalf("after the restart: %+v, want one snapshot installed (the leader is still %s)", s, lead)
		} else {
			t.Logf("the leadership moved to %s, which caught the node up from its log", lead)
		}
	}
}

// The figures of a snapshot of 100,000 1 KiB messages (random bodies,
// which the segments cannot compress): a follower whose data directory is
// wiped installs it; logged, not asserted. BROKERD_SNAPSHOT_FIGURES=1 runs
// it:
//
//	BROKERD_SNAPSHOT_FIGURES=1 go test -count=1 -run TestSnapshotFigures -v ./cluster/
func TestSnapshotFigures(t *testing.T) {
	if os.Getenv("BROKERD_SNAPSHOT_FIGURES") == "" {
		t.Skip("BROKERD_SNAPSHOT_FIGURES not set")
	}
	tc := newTestClusterKeeping(t, 1<<20)
	const q = store.QueueID(6)
	msgs, perBatch := 100_000, 100
	if n, err := strconv.Atoi(os.Getenv("BROKERD_SNAPSHOT_FIGURES")); err == nil && n > 1 {
		msgs = n // the number of messages
	}
	l := tc.leader()
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	var failed atomic.Int64
	inflight := make(chan struct{}, 8) // 800 KiB at a time
	for b := range msgs / perBatch {
		inflight <- struct{}{}
		var batch store.Batch
		for i := range perBatch {
			body := make([]byte, 1024)
			for j := range body {
				body[j] = byte(rng.Uint32())
			}
			m := &store.Message{ID: l.st.AllocMsgID(), Body: body, Persistent: true}
			batch.Messages = append(batch.Messages, m)
			batch.Puts = append(batch.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: uint64(b*perBatch + i + 1)}, Msg: m})
		}
		wg.Add(1)
		l.st.Apply(&batch, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			<-inflight
			wg.Done()
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d batches failed", failed.Load())
	}
	f := (tc.index(l.name) + 1) % 3
	tc.nodes[f].Close()
	tc.nodes[f] = nil
	if err := os.RemoveAll(tc.dirs[f]); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(tc.dirs[f], 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tc.start(f)
	for {
		if st := tc.nodes[f].Store(); st != nil {
			if n, err := st.LastSeq(q); err == nil && n == uint64(msgs) {
				break
			}
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("not installed: %+v", tc.nodes[f].Stats())
		}
		time.Sleep(10 * time.Millisecond) // polls the node
	}
	caughtUp := time.Since(start)
	if tc.nodes[f].Stats().SnapshotsInstalled == 0 {
		// A leader elected meanwhile (the publish can cost one) knows
		// nothing of what the node held, and sends its log if it has it.
		t.Fatalf("caught up from the log in %v, without a snapshot: no figures", caughtUp)
	}
	var n int
	if err := tc.nodes[f].Store().ScanQueue(q, 0, func(*store.Entry) bool { n++; return true }); err != nil || n != msgs {
		t.Fatalf("the follower holds %d entries (%v)", n, err)
	}
	ls, fs := tc.nodes[tc.index(l.name)].Stats(), tc.nodes[f].Stats()
	cs := time.Now()
	if _, err := l.st.CreateSnapshot(filepath.Join(t.TempDir(), "s"), nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages of 1 KiB: snapshot %.1f MiB; made again in %v; fetched in %v, installed in %v (restart to caught up %v)",
		msgs, float64(ls.SnapshotBytesSent)/(1<<20), time.Since(cs), fs.LastSnapshotFetch, fs.LastSnapshotInstall, caughtUp)
}

// A snapshot's meta file decodes to what was encoded; damaged or foreign
// bytes are an error, never a panic.
func FuzzSnapMeta(f *testing.F) {
	m := &snapMeta{index: 42, term: 3, prevTerm: 2, entryType: 0, entryData: []byte("entry"), conf: []byte{8, 1}}
	f.Add(m.encode())
	f.Add([]byte("brkdsnap"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeSnapMeta(b)
		if err != nil {
			return
		}
		again, err := decodeSnapMeta(got.encode())
		if err != nil || again.index != got.index || again.term != got.term || again.prevTerm != got.prevTerm ||
			again.entryType != got.entryType || string(again.entryData) != string(got.entryData) || string(again.conf) != string(got.conf) {
			t.Fatalf("%+v re-encoded decodes to %+v, %v", got, again, err)
		}
	})
}

func TestSnapMetaRoundTrip(t *testing.T) {
	m := &snapMeta{index: 42, term: 3, prevTerm: 2, entryType: 1, entryData: []byte("entry"), conf: []byte{8, 1}}
	b := m.encode()
	got, err := decodeSnapMeta(b)
	if err != nil || got.index != 42 || got.term != 3 || got.prevTerm != 2 || got.entryType != 1 || string(got.entryData) != "entry" || string(got.conf) != "\x08\x01" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	b[len(b)-6] ^= 1
	if _, err := decodeSnapMeta(b); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("a flipped bit: %v", err)
	}
}

// A request for a snapshot the node does not have is refused with the
// reason; file names a snapshot cannot hold are refused on receipt.
func TestSnapshotRequestRefused(t *testing.T) {
	tc := newTestCluster(t)
	l := tc.leader()
	f := tc.nodes[(tc.index(l.name)+1)%3]
	_, _, err := f.fetchSnapshot(context.Background(), l.name, "0000000000000001-0000000000000001", 0, filepath.Join(t.TempDir(), "recv"))
	if err == nil || !strings.Contains(err.Error(), "has no snapshot") {
		t.Fatalf("fetch of an unknown snapshot: %v", err)
	}
	for _, name := range []string{"../x", "index/../../x", "wal/000001.log", "index/", "index/a/b", "segments/..", "/etc/passwd", "meta2"} {
		if validSnapName(name) {
			t.Errorf("%q taken as a snapshot's file", name)
		}
	}
	for _, name := range []string{"meta", "index/000005.sst", "index/MANIFEST-000006", "segments/00000001.seg"} {
		if !validSnapName(name) {
			t.Errorf("%q refused", name)
		}
	}
}
