package diskstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

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

// BenchmarkPagingReads shows that the reads a paging queue uses cost what
// they return, not what the queue holds: one queue of 10k and of 200k
// entries (all checkpointed into the index, plus an overlay of recent
// puts and acks). ReadEntries reads windows of 256 from spread-out seqs,
// Queues lists the counters of 10 queues, LoadMessages reads the bodies of
// one window.
func BenchmarkPagingReads(b *testing.B) {
	for _, n := range []int{10_000, 200_000} {
		b.Run(fmt.Sprint("entries=", n), func(b *testing.B) {
			opts := quiet()
			opts.Sync = wal.SyncNone
			opts.CheckpointBytes = 1 << 40 // checkpoints only when the benchmark says
			s := openDir(b, b.TempDir(), opts)
			defer s.Close()
			body := make([]byte, 100)
			const q = store.QueueID(1)
			var seq uint64
			putN := func(k int) {
				var bt store.Batch
				for range k {
					seq++
					m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true}
					bt.Messages = append(bt.Messages, m)
					bt.Puts = append(bt.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m})
				}
				mustApply(b, s, &bt)
			}
			for seq < uint64(n) {
				putN(1000)
			}
			for other := store.QueueID(2); other <= 10; other++ {
				m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true}
				mustApply(b, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: other, Seq: 1}, Msg: m}}})
			}
			if err := s.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			// The overlay: 1000 new entries, 1000 acks at the head.
			putN(1000)
			var acks store.Batch
			for i := uint64(1); i <= 1000; i++ {
				acks.Deletes = append(acks.Deletes, store.Ref{Queue: q, Seq: i})
			}
			mustApply(b, s, &acks)
			wantCount := int64(n)

			b.Run("ReadEntries256", func(b *testing.B) {
				var dst []store.EntryMeta
				b.ReportAllocs()
				i := uint64(0)
				for b.Loop() {
					i++
					from := 1 + (i*7919)%uint64(n)
					var err error
					dst, err = s.ReadEntries(q, 0, from, 256, dst[:0])
					if err != nil {
						b.Fatal(err)
					}
					if len(dst) == 0 {
						b.Fatalf("empty window from %d", from)
					}
				}
				b.ReportMetric(float64(b.N*256)/b.Elapsed().Seconds(), "entries/s")
			})
			b.Run("Queues", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var count int64
					err := s.Queues(func(id store.QueueID, st store.QueueState) bool {
						if id == q {
							count = st.Levels[0].Count
						}
						return true
					})
					if err != nil {
						b.Fatal(err)
					}
					if count != wantCount {
						b.Fatalf("queue %d counts %d entries, want %d", q, count, wantCount)
					}
				}
			})
			b.Run("LoadMessages256", func(b *testing.B) {
				ms, err := s.ReadEntries(q, 0, uint64(n/2), 256, nil)
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]store.MsgID, len(ms))
				for i, m := range ms {
					ids[i] = m.Msg
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(ids) * len(body)))
				for b.Loop() {
					if err := s.LoadMessages(ids, func(int, *store.Message) {}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkRecover is Open's replay of a WAL nothing was checkpointed
// from: 20k records on an in-memory filesystem (publishes of a 1 KiB
// message to two queues, an ack of every other one, a definition every
// hundred), so what it measures is decoding and applying records, not the
// disk.
func BenchmarkRecover(b *testing.B) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	opts.Sync = wal.SyncNone
	opts.CheckpointBytes = 1 << 40 // everything stays in the WAL
	s := openDir(b, "data", opts)
	body := make([]byte, 1024)
	const n = 20_000
	records := 0
	for i := uint64(1); records < n; i++ {
		m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true, Header: store.Header{Exchange: "x", RoutingKeys: []string{"k"}}}
		bt := &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
			{Ref: store.Ref{Queue: 1, Seq: i}, Msg: m}, {Ref: store.Ref{Queue: 2, Seq: i}, Msg: m}}}
		if i%100 == 0 {
			bt.Meta = []store.MetaOp{{Key: fmt.Sprint("q/", i), Value: []byte("definition")}}
		}
		s.Apply(bt, nil)
		records++
		if i%2 == 0 {
			s.Apply(&store.Batch{Deletes: []store.Ref{{Queue: 1, Seq: i - 1}, {Queue: 2, Seq: i - 1}}}, nil)
			records++
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{}) // Close would checkpoint
	s.Close()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		opts.FS = clone.CrashClone(vfs.CrashCloneCfg{})
		b.StartTimer()
		r := openDir(b, "data", opts)
		b.StopTimer()
		if got := r.wal.LastLSN(); got != wal.LSN(records) {
			b.Fatalf("WAL ends at %d, want %d", got, records)
		}
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*records)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRecordCodec is the WAL record of the hot path's batches,
// encoded (Apply, under the store's mutex) and decoded (replay, a
// follower's ApplyEntry): a publish of a 1 KiB message to one queue, an
// ack, and a requeue's update, without and with a retry's delay (version
// 4).
func BenchmarkRecordCodec(b *testing.B) {
	m := &store.Message{ID: 1 << 30, Body: make([]byte, 1024), Persistent: true,
		Header: store.Header{Exchange: "x", RoutingKeys: []string{"k"}, Props: []byte{0x10, 0, 2}}}
	ref := store.Ref{Queue: 7, Seq: 1 << 20}
	for _, c := range []struct {
		name string
		b    store.Batch
		msgs []*store.Message
	}{
		{"publish", store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: ref, Msg: m}}}, []*store.Message{m}},
		{"ack", store.Batch{Deletes: []store.Ref{ref}}, nil},
		{"requeue", store.Batch{Updates: []store.Update{{Ref: ref, DeliveryCount: 1}}}, nil},
		{"requeue-delayed", store.Batch{Updates: []store.Update{{Ref: ref, DeliveryCount: 1, AcquiredCount: 1, ReadyAt: 1767225600000}}}, nil},
	} {
		rec := encodeRecord(nil, &c.b, c.msgs)
		b.Run(c.name+"/encode", func(b *testing.B) {
			buf := make([]byte, 0, 2048)
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				buf = encodeRecord(buf[:0], &c.b, c.msgs)
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if _, err := decodeWALRecord(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
