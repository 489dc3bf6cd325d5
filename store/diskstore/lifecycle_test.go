package diskstore

import (
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
)

// Sync returns after every batch applied before it has completed.
func TestSyncWaitsForCompletions(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet())
	defer s.Close()
	const n = 200
	var done atomic.Int64
	for i := range n {
		m := &store.Message{ID: s.AllocMsgID(), Body: []byte("x"), Persistent: true}
		s.Apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: uint64(i + 1)}, Msg: m}}},
			func(err error) {
				if err != nil {
					t.Error(err)
				}
				done.Add(1)
			})
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := done.Load(); got != n {
		t.Fatalf("%d of %d completions ran before Sync returned", got, n)
	}
}

// RecoveryProgress reports the WAL replay from 0 to every record, in
// increasing order.
func TestRecoveryProgress(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	opts.CheckpointBytes = 1 << 40 // nothing checkpointed: all is replayed
	s := openDir(t, "data", opts)
	const n = 300
	for i := range n {
		m := &store.Message{ID: s.AllocMsgID(), Body: []byte("x"), Persistent: true}
		errc := make(chan error, 1)
		s.Apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: uint64(i + 1)}, Msg: m}}},
			func(err error) { errc <- err })
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// A power loss: Close would checkpoint.
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	opts.FS = clone
	type report struct{ done, total uint64 }
	var got []report
	opts.RecoveryProgress = func(done, total uint64) { got = append(got, report{done, total}) }
	s = openDir(t, "data", opts)
	defer s.Close()
	if len(got) < 3 {
		t.Fatalf("progress reports %v, want at least start, some, end", got)
	}
	if first, last := got[0], got[len(got)-1]; first.done != 0 || last.done != last.total || last.total < n {
		t.Fatalf("progress from %v to %v, want from 0 to all of at least %d records", first, last, n)
	}
	for i := 1; i < len(got); i++ {
		if got[i].done < got[i-1].done || got[i].total != got[0].total {
			t.Fatalf("progress reports not increasing: %v", got)
		}
	}
	if len(got) > 102 {
		t.Errorf("%d progress reports, want at most one per percent and the end", len(got))
	}
}
