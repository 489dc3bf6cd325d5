package diskstore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
)

// TestCrashDuringWrites simulates power loss while several writers apply
// batches without waiting and checkpoints run underneath: a crash clone of
// the filesystem keeps only what was fsync'd. After reopening it:
//   - every batch whose done reported success is there;
//   - every batch is all there or not at all: a publish to two queues is in
//     both or neither, a dead-letter move (delete + put) is in exactly one
//     place;
//   - nothing is there that was never applied;
//   - entries come back with their fields (the q2 entries carry a retry's
//     ready-at time and acquired count: version-4 records, version-3
//     index values).
func TestCrashDuringWrites(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) { crashDuringWrites(t, uint64(round)) })
	}
}

func crashDuringWrites(t *testing.T, seed uint64) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	opts.CheckpointBytes = 32 << 10 // many checkpoints under the writers
	opts.WALSegmentSize = 128 << 10
	s := openDir(t, "data", opts)

	const writers = 4
	const perWriter = 300
	rng := rand.New(rand.NewPCG(seed, 7))
	crashAt := int64(200 + rng.IntN(writers*perWriter-400))

	var mu sync.Mutex
	confirmedNow := map[string]bool{} // writer/i/op → true once done(nil) ran
	var confirmed map[string]bool     // confirmedNow when the crash clone was taken
	var completions atomic.Int64
	crashed := make(chan vfs.FS, 1)
	var once sync.Once
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q1, q2, q3 := store.QueueID(10+w), store.QueueID(20+w), store.QueueID(30+w)
			for i := uint64(1); i <= perWriter; i++ {
				m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: []byte(fmt.Sprintf("w%d-%d", w, i)),
					Header: store.Header{Exchange: "x", RoutingKeys: []string{"k"}}}
				// Publish to q1 and q2.
				b := &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
					{Ref: store.Ref{Queue: q1, Seq: i}, Msg: m},
					{Ref: store.Ref{Queue: q2, Seq: i}, Msg: m, ReadyAt: int64(i), AcquiredCount: uint32(w + 1)},
				}}
				key := fmt.Sprintf("%d/%d/pub", w, i)
				done := func(key string) func(error) {
					return func(err error) {
						mu.Lock()
						defer mu.Unlock()
						if err == nil {
							confirmedNow[key] = true
						}
						if completions.Add(1) == crashAt {
							once.Do(func() {
								confirmed = maps.Clone(confirmedNow)
								crashed <- fs.CrashClone(vfs.CrashCloneCfg{})
							})
						}
					}
				}
				s.Apply(b, done(key))
				// Dead-letter every other one from q1 to q3.
				if i%2 == 0 {
					s.Apply(&store.Batch{Messages: []*store.Message{m},
						Deletes: []store.Ref{{Queue: q1, Seq: i}},
						Puts:    []store.Entry{{Ref: store.Ref{Queue: q3, Seq: i}, Msg: m}}}, done(fmt.Sprintf("%d/%d/dl", w, i)))
				}
			}
		}()
	}
	wg.Wait()
	clone := <-crashed
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	opts.FS = clone
	r := openDir(t, "data", opts)
	defer r.Close()

	for w := range writers {
		q1, q2, q3 := store.QueueID(10+w), store.QueueID(20+w), store.QueueID(30+w)
		got := func(q store.QueueID) map[uint64]string {
			m := map[uint64]string{}
			err := r.ScanQueue(q, 0, func(e *store.Entry) bool {
				m[e.Seq] = string(e.Msg.Body)
				if q == q2 && (e.ReadyAt != int64(e.Seq) || e.AcquiredCount != uint32(w+1)) {
					t.Fatalf("queue %d seq %d: ready at %d, acquired %d; want %d, %d", q, e.Seq, e.ReadyAt, e.AcquiredCount, e.Seq, w+1)
				}
				return true
			})
			if err != nil {
				t.Fatalf("scan %d: %v", q, err)
			}
			return m
		}
		g1, g2, g3 := got(q1), got(q2), got(q3)
		for i := uint64(1); i <= perWriter; i++ {
			body := fmt.Sprintf("w%d-%d", w, i)
			pubOK := confirmed[fmt.Sprintf("%d/%d/pub", w, i)]
			dlOK := confirmed[fmt.Sprintf("%d/%d/dl", w, i)]
			in1, in2, in3 := g1[i] == body, g2[i] == body, g3[i] == body
			for q, g := range map[store.QueueID]map[uint64]string{q1: g1, q2: g2, q3: g3} {
				if v, ok := g[i]; ok && v != body {
					t.Fatalf("queue %d seq %d holds %q, want %q", q, i, v, body)
				}
			}
			if pubOK && !in2 {
				t.Fatalf("writer %d message %d: publish confirmed but missing from queue %d", w, i, q2)
			}
			if in1 != in2 && !in3 {
				t.Fatalf("writer %d message %d: publish torn: in q1 %v, q2 %v", w, i, in1, in2)
			}
			if i%2 == 0 {
				if in1 && in3 {
					t.Fatalf("writer %d message %d: dead letter in source and target", w, i)
				}
				if in2 && !in1 && !in3 {
					t.Fatalf("writer %d message %d: dead letter in neither source nor target", w, i)
				}
				if dlOK && !in3 {
					t.Fatalf("writer %d message %d: dead-letter move confirmed but not in the target", w, i)
				}
			} else if in3 {
				t.Fatalf("writer %d message %d: in q3 but never dead-lettered", w, i)
			}
		}
	}
}
