package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitFor = 30 * time.Second

// testCluster is three nodes on loopback, each with its own store
// directory. serving gets a node's name and store when it starts serving.
type testCluster struct {
	t       *testing.T
	names   []string
	addrs   []string
	dirs    []string
	nodes   []*Node
	serving chan servingNode
	keep    int64 // Config.LogKeepBytes (0: the default)
}

type servingNode struct {
	name  string
	st    *diskstore.Store
	lease *Lease
}

func newTestCluster(t *testing.T) *testCluster { return newTestClusterKeeping(t, 0) }

// newTestClusterKeeping starts a test cluster whose nodes keep keep bytes
// of the log (Config.LogKeepBytes).
func newTestClusterKeeping(t *testing.T, keep int64) *testCluster {
	tc := &testCluster{t: t, names: []string{"n1", "n2", "n3"}, serving: make(chan servingNode, 16), keep: keep}
	for range tc.names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tc.addrs = append(tc.addrs, l.Addr().String())
		l.Close() // reopened by the node: its address is in every peer list
		tc.dirs = append(tc.dirs, t.TempDir())
	}
	tc.nodes = make([]*Node, len(tc.names))
	for i := range tc.names {
		tc.start(i)
	}
	t.Cleanup(func() {
		for i, n := range tc.nodes {
			if n != nil {
				n.Close()
				tc.nodes[i] = nil
			}
		}
	})
	return tc
}

func (tc *testCluster) start(i int) {
	var peers []Peer
	for j, name := range tc.names {
		peers = append(peers, Peer{Name: name, Addr: tc.addrs[j]})
	}
	name := tc.names[i]
	n, err := Open(Config{
		Cluster: "test", Name: name, Peers: peers, Listen: tc.addrs[i], Dir: tc.dirs[i],
		Store: diskstore.Options{CheckpointBytes: 64 << 10, WALSegmentSize: 256 << 10, Logger: quiet()},
		Tick:  20 * time.Millisecond, Logger: quiet(), LogKeepBytes: tc.keep,
		Serve: func(ctx context.Context, st *diskstore.Store, lease *Lease) {
			tc.serving <- servingNode{name, st, lease}
			<-ctx.Done()
		},
	})
	if err != nil {
		tc.t.Fatalf("open %s: %v", name, err)
	}
	tc.nodes[i] = n
}

func (tc *testCluster) index(name string) int {
	for i, n := range tc.names {
		if n == name {
			return i
		}
	}
	tc.t.Fatalf("no node %s", name)
	return -1
}

// leader waits for a node to serve (other than those in not) and returns it.
func (tc *testCluster) leader(not ...string) servingNode {
	tc.t.Helper()
	timeout := time.After(waitFor)
	for {
		select {
		case s := <-tc.serving:
			if !strings.Contains(strings.Join(not, ","), s.name) {
				return s
			}
		case <-timeout:
			tc.t.Fatal("no node started serving")
		}
	}
}

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// publish applies n batches to st, each a definition and a message put in
// queue q from seq from, and waits for every done.
func publish(t *testing.T, st *diskstore.Store, q store.QueueID, from uint64, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		seq := from + uint64(i)
		m := &store.Message{ID: st.AllocMsgID(), Body: []byte(fmt.Sprintf("body %d", seq)), Persistent: true}
		b := store.Batch{
			Messages: []*store.Message{m},
			Puts:     []store.Entry{{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m}},
			Meta:     []store.MetaOp{{Key: fmt.Sprintf("d/%06d", seq), Value: []byte("v")}},
		}
		wg.Add(1)
		st.Apply(&b, func(err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a publish failed: %v", err)
	}
}

// awaitApplied waits until node i's store holds n entries in q and n
// definitions, and checks their bodies.
func (tc *testCluster) awaitApplied(i int, q store.QueueID, n int) {
	tc.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		st := tc.nodes[i].Store()
		if st != nil {
			got, defs, err := contents(st, q)
			if err == nil && len(got) == n && defs == n {
				for seq, body := range got {
					if want := fmt.Sprintf("body %d", seq); body != want {
						tc.t.Fatalf("%s: entry %d holds %q, want %q", tc.names[i], seq, body, want)
					}
				}
				return
			}
			if time.Now().After(deadline) {
				if testing.Verbose() {
					for j, n := range tc.nodes {
						if n != nil {
							fmt.Fprintf(os.Stderr, "%s: %+v\n", tc.names[j], n.Status())
						}
					}
				}
				tc.t.Fatalf("%s holds %d entries and %d definitions (%v), want %d; status %+v", tc.names[i], len(got), defs, err, n, tc.nodes[i].Status())
			}
		}
		// Polling a store another goroutine applies to: no event says
		// "caught up" from outside.
		time.Sleep(10 * time.Millisecond) // polls the store
	}
}

func contents(st *diskstore.Store, q store.QueueID) (map[uint64]string, int, error) {
	var ids []store.MsgID
	var seqs []uint64
	err := st.ScanQueue(q, 0, func(e *store.Entry) bool {
		ids = append(ids, e.Msg.ID)
		seqs = append(seqs, e.Seq)
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	got := make(map[uint64]string)
	err = st.LoadMessages(ids, func(i int, m *store.Message) { got[seqs[i]] = string(m.Body) })
	if err != nil {
		return nil, 0, err
	}
	defs := 0
	err = st.ScanMeta("d/", func(string, []byte) bool { defs++; return true })
	return got, defs, err
}

// Three nodes elect a leader, which serves; what it applies is confirmed
// once committed and reaches both followers' stores, message ids carrying
// the group. The leader's death moves serving to another node, whose store
// holds everything confirmed; the dead node, restarted, catches up.
func TestClusterReplicatesAndFailsOver(t *testing.T) {
	tc := newTestCluster(t)
	const q = store.QueueID(7)
	l := tc.leader()
	if id := l.st.AllocMsgID(); id>>48 != DataGroup {
		t.Fatalf("message id %#x has no group in its high bits", id)
	}
	publish(t, l.st, q, 1, 300)
	for i := range tc.names {
		tc.awaitApplied(i, q, 300)
	}

	li := tc.index(l.name)
	tc.nodes[li].Close()
	tc.nodes[li] = nil
	l2 := tc.leader(l.name)
	if got, _, err := contents(l2.st, q); err != nil || len(got) != 300 {
		t.Fatalf("the new leader %s holds %d entries (%v), want 300", l2.name, len(got), err)
	}
	publish(t, l2.st, q, 301, 100)

	tc.start(li)
	for i := range tc.names {
		tc.awaitApplied(i, q, 400)
	}
}

// Check passes while a node's Raft loop runs what is queued on it, and
// fails, within its deadline, while the loop is stuck.
func TestNodeCheck(t *testing.T) {
	tc := newTestCluster(t)
	tc.leader()
	for i, n := range tc.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		if err := n.Check(ctx); err != nil {
			t.Fatalf("%s: %v", tc.names[i], err)
		}
		cancel()
	}
	release, stuck := make(chan struct{}), make(chan struct{})
	if !tc.nodes[0].replicaNode().Run(func() { close(stuck); <-release }) {
		t.Fatal("the loop does not run")
	}
	<-stuck
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := tc.nodes[0].Check(ctx)
	close(release)
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a stuck loop: %v", err)
	}
}
