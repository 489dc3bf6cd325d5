package queue

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
)

// TestTxnBatches builds batches on both sides of smallBatch, with messages
// interleaved across puts and puts cancelled by deletes in the same txn,
// and checks the store accepts each batch and holds exactly what survives.
func TestTxnBatches(t *testing.T) {
	for _, n := range []int{1, smallBatch, smallBatch + 1, 5 * smallBatch} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			st := memstore.New()
			b := &Env{Store: st, Log: slog.Default()}
			msgs := []*store.Message{{ID: 1, Persistent: true}, {ID: 2, Persistent: true}, {ID: 3, Persistent: true}}
			tx := b.newTxn()
			var entries []*Entry
			for i := 0; i < n; i++ {
				e := &Entry{stored: true}
				e.Ref = store.Ref{Queue: store.QueueID(1 + i%2), Seq: uint64(i + 1)}
				e.Msg = msgs[i%len(msgs)] // interleaved: 1,2,3,1,2,3…
				tx.put(e)
				entries = append(entries, e)
			}
			// Every third put is cancelled within the same txn (a message
			// taken by a no-ack consumer before its put was written).
			kept := map[store.Ref]bool{}
			for i, e := range entries {
				if i%3 == 2 {
					tx.del(e)
				} else {
					kept[e.Ref] = true
				}
			}
			seen := map[*store.Message]int{}
			for _, m := range tx.Batch.Messages {
				seen[m]++
				if seen[m] > 1 {
					t.Fatalf("message %d listed twice", m.ID)
				}
			}
			var applyErr error
			tx.apply(func(err error) { applyErr = err })
			if applyErr != nil {
				t.Fatalf("store refused the batch: %v", applyErr)
			}
			got := map[store.Ref]bool{}
			for q := store.QueueID(1); q <= 2; q++ {
				if err := st.ScanQueue(q, 0, func(e *store.Entry) bool { got[e.Ref] = true; return true }); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(kept) {
				t.Fatalf("store holds %d entries, want %d", len(got), len(kept))
			}
			for r := range kept {
				if !got[r] {
					t.Fatalf("entry %v missing", r)
				}
			}
			// A second txn deletes what is stored: the deletes go out as
			// deletes, not as cancelled puts.
			tx2 := b.newTxn()
			for i, e := range entries {
				if i%3 != 2 {
					tx2.del(e)
				}
			}
			tx2.apply(func(err error) { applyErr = err })
			if applyErr != nil {
				t.Fatalf("store refused the deletes: %v", applyErr)
			}
			for q := store.QueueID(1); q <= 2; q++ {
				_ = st.ScanQueue(q, 0, func(e *store.Entry) bool { t.Fatalf("entry %v left", e.Ref); return false })
			}
		})
	}
}
