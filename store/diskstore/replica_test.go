package diskstore

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// appendRaw appends rec to s's WAL as the replica layer will, among
// Apply's records (under s.mu, which orders those), and waits for it to
// be durable. The active overlay does not see it: only a replay does.
func appendRaw(t *testing.T, s *Store, rec []byte, class wal.Class) wal.LSN {
	t.Helper()
	done := make(chan error, 1)
	s.mu.Lock()
	lsn := s.wal.Append(rec, class, func(_ wal.LSN, err error) { done <- err })
	s.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("append record %d: %v", lsn, err)
	}
	return lsn
}

// walVersions lists the version and kind bytes of the WAL records in
// dir/wal on fs (read from a copy: fs is left as it is).
func walVersions(t *testing.T, fs *vfs.MemFS, dir string) []string {
	t.Helper()
	w, err := wal.Open(subdir(dir, "wal"), wal.Options{FS: fs.CrashClone(vfs.CrashCloneCfg{})})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got []string
	err = w.ReplayClasses(1, func(lsn wal.LSN, c wal.Class, rec []byte) error {
		v := fmt.Sprintf("v%d", rec[0])
		if rec[0] == recordVersionKind {
			v += "-" + kindName(rec[1])
		}
		got = append(got, v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A WAL holding records of version 1 and 2 (Apply's) and version-3 local
// and volatile records replays each exactly as its batch: the local
// record's puts, deletes and definitions are there after a crash, its
// message serves a later version-1 record that names it by id, and the
// volatile record's entries are not recovered but its message id is never
// handed out again.
func TestReplayRecordKinds(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	msg := func(body string) *store.Message {
		return &store.Message{ID: s.AllocMsgID(), Body: []byte(body), Persistent: true}
	}
	const q1, q2, q3 = store.QueueID(1), store.QueueID(2), store.QueueID(3)
	const vq = store.VolatileQueue | 4
	origin := &store.Origin{Queue: "q1", Reason: "rejected", At: 1767225600123}

	m1 := msg("one")
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m1}, Puts: []store.Entry{{Ref: store.Ref{Queue: q1, Seq: 1}, Msg: m1}},
		Meta: []store.MetaOp{{Key: "q/one", Value: []byte("v1")}}})
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m1}, Puts: []store.Entry{{Ref: store.Ref{Queue: q2, Seq: 1}, Msg: m1, Origin: origin}}})
	m3 := msg("three")
	local := &store.Batch{Messages: []*store.Message{m3},
		Puts:    []store.Entry{{Ref: store.Ref{Queue: q1, Seq: 2}, Msg: m3}, {Ref: store.Ref{Queue: q3, Seq: 1}, Msg: m3, Deadline: 1767225600999}},
		Deletes: []store.Ref{{Queue: q1, Seq: 1}},
		Meta:    []store.MetaOp{{Key: "q/three", Value: []byte("v3")}, {Key: "q/one"}}}
	appendRaw(t, s, encodeBatchRecord(nil, kindLocal, local, local.Messages), wal.Durable)
	m3.Stored.Store(true) // in the log now: the next record names it by id
	mv := msg("volatile")
	volatile := &store.Batch{Messages: []*store.Message{mv}, Puts: []store.Entry{{Ref: store.Ref{Queue: vq, Seq: 1}, Msg: mv}}}
	appendRaw(t, s, encodeBatchRecord(nil, kindVolatile, volatile, volatile.Messages), wal.Volatile)
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m3}, Puts: []store.Entry{{Ref: store.Ref{Queue: q3, Seq: 2}, Msg: m3}}})

	crash := fs.CrashClone(vfs.CrashCloneCfg{}) // Close would checkpoint
	s.Close()
	if got, want := walVersions(t, crash, "data"), []string{"v1", "v2", "v3-local", "v3-volatile", "v1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the WAL holds records %v, want %v", got, want)
	}
	opts.FS = crash
	r := openDir(t, "data", opts)
	defer r.Close()

	type entry struct {
		body     string
		origin   *store.Origin
		deadline int64
	}
	scan := func(q store.QueueID) map[uint64]entry {
		t.Helper()
		got := map[uint64]entry{}
		if err := r.ScanQueue(q, 0, func(e *store.Entry) bool {
			got[e.Seq] = entry{string(e.Msg.Body), e.Origin, e.Deadline}
			return true
		}); err != nil {
			t.Fatalf("scan queue %d: %v", q, err)
		}
		return got
	}
	for _, c := range []struct {
		q    store.QueueID
		want map[uint64]entry
	}{
		{q1, map[uint64]entry{2: {body: "three"}}}, // seq 1 deleted by the local record
		{q2, map[uint64]entry{1: {body: "one", origin: origin}}},
		{q3, map[uint64]entry{1: {body: "three", deadline: 1767225600999}, 2: {body: "three"}}},
		{vq, map[uint64]entry{}},
	} {
		if got := scan(c.q); !reflect.DeepEqual(got, c.want) {
			t.Errorf("queue %d after replay: %+v, want %+v", c.q, got, c.want)
		}
	}
	meta := map[string]string{}
	if err := r.ScanMeta("q/", func(k string, v []byte) bool { meta[k] = string(v); return true }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"q/three": "v3"}; !reflect.DeepEqual(meta, want) {
		t.Errorf("definitions after replay: %v, want %v", meta, want)
	}
	if id := r.AllocMsgID(); id <= mv.ID {
		t.Errorf("after replay the next message id is %d, but the volatile record used %d", id, mv.ID)
	}
}

// replicaRecord is what a ReplicaLog was handed.
type replicaRecord struct {
	lsn wal.LSN
	e   *LogEntry
	hs  *HardState
}

func (r replicaRecord) String() string {
	if r.e != nil {
		return fmt.Sprintf("%d:entry%+v", r.lsn, *r.e)
	}
	return fmt.Sprintf("%d:hardstate%+v", r.lsn, *r.hs)
}

// recorder is a ReplicaLog that keeps what it is handed and fails with
// failAt's error at that LSN.
type recorder struct {
	got    []replicaRecord
	failAt wal.LSN
}

var errRecorder = errors.New("recorder refuses")

func (r *recorder) ReplayEntry(lsn wal.LSN, e LogEntry) error {
	r.got = append(r.got, replicaRecord{lsn: lsn, e: &e})
	if lsn == r.failAt {
		return errRecorder
	}
	return nil
}

func (r *recorder) ReplayHardState(lsn wal.LSN, hs HardState) error {
	r.got = append(r.got, replicaRecord{lsn: lsn, hs: &hs})
	if lsn == r.failAt {
		return errRecorder
	}
	return nil
}

// Entries and hard states in the WAL go to Options.ReplicaLog at Open, in
// LSN order with every field, the store's own batches around them
// replayed as usual. Without a ReplicaLog, Open fails at the first of them
// with ErrNoReplicaLog and its LSN: a single node never skips replicated
// data. An error of the ReplicaLog's fails Open with it and the LSN.
func TestReplayReplicaRecords(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	put := func(seq uint64) {
		m := &store.Message{ID: s.AllocMsgID(), Body: fmt.Appendf(nil, "m%d", seq), Persistent: true}
		mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: seq}, Msg: m}}})
	}
	var want []replicaRecord
	entry := func(e LogEntry) {
		want = append(want, replicaRecord{lsn: appendRaw(t, s, encodeEntry(nil, &e), wal.Durable), e: &e})
	}
	hardState := func(hs HardState) {
		want = append(want, replicaRecord{lsn: appendRaw(t, s, encodeHardState(nil, &hs), wal.Durable), hs: &hs})
	}
	put(1)
	entry(LogEntry{Group: 7, Term: 2, Index: 10, Data: []byte("first proposal")})
	entry(LogEntry{Group: 7, Term: 2, Index: 11, Data: []byte("second proposal")})
	hardState(HardState{Group: 7, Term: 2, Vote: 3, Commit: 10})
	put(2)
	// A new leader's log: index 11 again, in a new term (the receiver's
	// suffix truncation drops the first 11); its first entry is empty.
	entry(LogEntry{Group: 7, Term: 3, Index: 11, Data: []byte{}})
	entry(LogEntry{Group: 0, Term: 1, Index: 1, Type: 1, Data: []byte("conf change")})
	hardState(HardState{Group: 7, Term: 3, Vote: 1, Commit: 11})
	put(3)
	crash := fs.CrashClone(vfs.CrashCloneCfg{}) // Close would checkpoint
	s.Close()

	t.Run("no ReplicaLog", func(t *testing.T) {
		opts.FS = crash.CrashClone(vfs.CrashCloneCfg{})
		r, err := Open("data", opts)
		if err == nil {
			r.Close()
			t.Fatal("Open succeeded with entries in the WAL and no ReplicaLog")
		}
		if !errors.Is(err, ErrNoReplicaLog) || !strings.Contains(err.Error(), fmt.Sprintf("wal record %d (entry of group 7)", want[0].lsn)) {
			t.Fatalf("Open: %v; want ErrNoReplicaLog naming record %d, the first entry", err, want[0].lsn)
		}
	})
	t.Run("ReplicaLog", func(t *testing.T) {
		var rec recorder
		opts.FS = crash.CrashClone(vfs.CrashCloneCfg{})
		opts.ReplicaLog = &rec
		r := openDir(t, "data", opts)
		defer r.Close()
		if fmt.Sprint(rec.got) != fmt.Sprint(want) {
			t.Fatalf("the ReplicaLog was handed\n%v\nwant\n%v", rec.got, want)
		}
		var seqs []uint64
		if err := r.ScanQueue(1, 0, func(e *store.Entry) bool {
			if string(e.Msg.Body) != fmt.Sprintf("m%d", e.Seq) {
				t.Errorf("seq %d holds %q", e.Seq, e.Msg.Body)
			}
			seqs = append(seqs, e.Seq)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(seqs, []uint64{1, 2, 3}) {
			t.Fatalf("queue 1 after replay holds seqs %v, want 1 2 3: the batches among the entries are replayed", seqs)
		}
	})
	t.Run("ReplicaLog fails", func(t *testing.T) {
		fail := want[2] // the first hard state
		rec := recorder{failAt: fail.lsn}
		opts.FS = crash.CrashClone(vfs.CrashCloneCfg{})
		opts.ReplicaLog = &rec
		r, err := Open("data", opts)
		if err == nil {
			r.Close()
			t.Fatal("Open succeeded though the ReplicaLog failed")
		}
		if !errors.Is(err, errRecorder) || !strings.Contains(err.Error(), fmt.Sprintf("wal record %d: replay hardstate of group 7", fail.lsn)) {
			t.Fatalf("Open: %v; want the ReplicaLog's error naming record %d", err, fail.lsn)
		}
		if fmt.Sprint(rec.got) != fmt.Sprint(want[:3]) {
			t.Fatalf("the ReplicaLog was handed %v, want %v and nothing after the failure", rec.got, want[:3])
		}
	})
}

// A version-3 record whose kind contradicts its WAL class (an entry or a
// local batch in a Volatile record, a volatile batch in a Durable one)
// makes Open fail naming its LSN; nothing of it is guessed.
func TestReplayRefusesKindAgainstClass(t *testing.T) {
	m := &store.Message{ID: 1, Body: []byte("x")}
	b := &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}}
	for _, c := range []struct {
		name  string
		rec   []byte
		class wal.Class
	}{
		{"entry in a volatile record", encodeEntry(nil, &LogEntry{Group: 1, Term: 1, Index: 1}), wal.Volatile},
		{"local batch in a volatile record", encodeBatchRecord(nil, kindLocal, b, b.Messages), wal.Volatile},
		{"volatile batch in a durable record", encodeBatchRecord(nil, kindVolatile, b, b.Messages), wal.Durable},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := quiet()
			opts.FS = fs
			opts.ReplicaLog = &recorder{}
			s := openDir(t, "data", opts)
			lsn := appendRaw(t, s, c.rec, c.class)
			appendRaw(t, s, encodeHardState(nil, &HardState{Group: 1}), wal.Durable) // syncs a volatile one
			opts.FS = fs.CrashClone(vfs.CrashCloneCfg{})
			s.Close()
			r, err := Open("data", opts)
			if err == nil {
				r.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("wal record %d:", lsn)) {
				t.Fatalf("Open: %v; want errCorrupt naming record %d", err, lsn)
			}
		})
	}
}
