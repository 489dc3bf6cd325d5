package transport

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// MsgApps of one 1 KiB entry from one node to another over loopback, up
// to 2048 in flight (half the queue: none dropped); one Send per message,
// the worst case for Send. msgs/s and MB/s (SetBytes: the entry).
func BenchmarkSend1KiBAppends(b *testing.B) {
	c := newCluster(b, clusterOpts{n: 2})
	from, to := c.nodes[0], c.nodes[1]
	c.connected(b)
	var got atomic.Int64
	progress := make(chan struct{}, 1)
	to.onRecv = func(recv) bool {
		got.Add(1)
		select {
		case progress <- struct{}{}:
		default:
		}
		return false // counted, not kept
	}
	entry := bytes.Repeat([]byte("x"), 1024)
	msgs := make([]*pb.Message, 4096)
	for i := range msgs {
		msgs[i] = msg(pb.MsgApp, from, to, uint64(i), entry)
	}
	const window = 2048
	sender := from.tr.Group(1)
	b.SetBytes(int64(len(entry)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		for int64(i)-got.Load() >= window {
			<-progress
		}
		sender.Send(msgs[i%len(msgs) : i%len(msgs)+1])
	}
	for got.Load() < int64(b.N) {
		<-progress
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if st := from.tr.Stats(); st.Dropped != 0 {
		b.Fatalf("%d dropped", st.Dropped)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// Heartbeat latency on the small stream while 64 MiB of 1 MiB appends
// flow on the bulk one (two-streams), and with both on one connection
// (one-stream, the control): p50, p99 and max over every round's
// heartbeats. Run with -benchtime=Nx for N rounds.
func BenchmarkHeartbeatUnderBulk(b *testing.B) {
	for _, bc := range []struct {
		name   string
		single bool
	}{{"two-streams", false}, {"one-stream", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var all []time.Duration
			for range b.N {
				lat, st := heartbeatsUnderBulk(b, bc.single, 64)
				if st.Dropped != 0 {
					b.Fatalf("%d dropped", st.Dropped)
				}
				all = append(all, lat...)
			}
			p50, p99, mx := percentiles(all)
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			b.ReportMetric(float64(mx.Microseconds()), "max-µs")
			b.ReportMetric(float64(len(all)), "heartbeats")
		})
	}
}
