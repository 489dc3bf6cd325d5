package diskstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// BenchmarkPublishAck is the store's share of a durable publish → ack:
// one batch putting a 1 KiB message, one deleting it, from concurrent
// publishers, on a real directory, waiting for each publish's completion
// as a publisher confirm does. With fsync, group commit is what makes
// this fast: one fsync covers every publisher's records.
func BenchmarkPublishAck(b *testing.B) {
	for _, sync := range []wal.SyncPolicy{wal.SyncFsync, wal.SyncNone} {
		b.Run(fmt.Sprint("sync=", sync), func(b *testing.B) {
			opts := quiet()
			opts.Sync = sync
			s := openDir(b, b.TempDir(), opts)
			defer s.Close()
			body := make([]byte, 1024)
			var q atomic.Uint64
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.SetParallelism(64) // many publishers in flight, as many channels would be
			b.RunParallel(func(pb *testing.PB) {
				qid := store.QueueID(q.Add(1))
				var seq uint64
				done := make(chan error, 1)
				for pb.Next() {
					seq++
					m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true, Header: store.Header{Exchange: "x", RoutingKeys: []string{"k"}}}
					ref := store.Ref{Queue: qid, Seq: seq}
					s.Apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: ref, Msg: m}}}, func(err error) { done <- err })
					if err := <-done; err != nil {
						b.Fatal(err)
					}
					s.Apply(&store.Batch{Deletes: []store.Ref{ref}}, nil)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			st := s.wal.Stats()
			b.ReportMetric(float64(st.Syncs)/float64(b.N), "fsyncs/msg")
		})
	}
}
