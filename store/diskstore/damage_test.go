package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// memRead returns the bytes of path on fs.
func memRead(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memWrite replaces path's bytes on fs.
func memWrite(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(slices.Clone(b)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// logTo is a logger writing into a buffer safe for concurrent use.
type logTo struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logTo) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logTo) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// distinctBody is message i's body: its text names it, so its bytes can be
// found in a file.
func distinctBody(i, n int) []byte {
	tag := fmt.Sprintf("<body of message %06d>", i)
	return []byte(strings.Repeat(tag, n/len(tag)+1)[:n])
}

// TestDamagedSegmentBlockLosesOnlyItsMessages: a flipped byte in a segment
// block. LoadMessages returns every other message intact and names the
// damaged block's messages, exactly those, in a *store.DamageError with
// the file and offset; the store keeps working (applies, checkpoints);
// compaction leaves the damaged segment alone instead of failing the
// store; and once the damaged messages' entries are deleted the segment
// goes like any other.
func TestDamagedSegmentBlockLosesOnlyItsMessages(t *testing.T) {
	fs := vfs.NewMem()
	var logs logTo
	opts := Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil)), CheckpointBytes: 1 << 40, CacheBytes: -1}
	s := openDir(t, "data", opts)
	const n = 300
	var ids []store.MsgID
	b := &store.Batch{}
	for i := range n {
		m := &store.Message{ID: s.AllocMsgID(), Body: distinctBody(i, 700), Persistent: true}
		ids = append(ids, m.ID)
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Seq: uint64(i + 1)}, Msg: m})
	}
	mustApply(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := fs.List("data/segments")
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments: %v %v, want one file", segs, err)
	}
	path := fs.PathJoin("data/segments", segs[0])
	data := memRead(t, fs, path)
	at := len(data) / 2
	data[at] ^= 0x20
	memWrite(t, fs, path, data)

	s = openDir(t, "data", opts)
	defer func() { s.Close() }()
	// The messages whose location names the damaged block.
	locs := map[store.MsgID]segment.Loc{}
	var block uint32
	for _, id := range ids {
		raw, closer, err := s.db.Get(index.MsgKey(nil, uint64(id)))
		if err != nil {
			t.Fatal(err)
		}
		var mv index.MsgValue
		if err := index.DecodeMsgValue(slices.Clone(raw), &mv); err != nil {
			t.Fatal(err)
		}
		closer.Close()
		loc, err := segment.DecodeLoc(mv.Loc)
		if err != nil {
			t.Fatal(err)
		}
		locs[id] = loc
		if int(loc.Block) <= at {
			block = max(block, loc.Block)
		}
	}
	var inBlock []store.MsgID
	for _, id := range ids {
		if locs[id].Block == block {
			inBlock = append(inBlock, id)
		}
	}
	got := map[store.MsgID]bool{}
	err = s.LoadMessages(ids, func(i int, m *store.Message) {
		if !bytes.Equal(m.Body, distinctBody(i, 700)) {
			t.Errorf("message %d read back wrong", ids[i])
		}
		got[ids[i]] = true
	})
	var de *store.DamageError
	if !errors.As(err, &de) || !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("LoadMessages = %v, want a *store.DamageError", err)
	}
	if !slices.Equal(de.Msgs(), inBlock) {
		t.Fatalf("damaged messages %v, want those of the block at %d: %v", de.Msgs(), block, inBlock)
	}
	if len(de.Damage) != 1 || de.Damage[0].File != path || de.Damage[0].Offset != int64(block) {
		t.Fatalf("damage %+v, want %s offset %d", de.Damage, path, block)
	}
	if len(got) != n-len(inBlock) || len(inBlock) == 0 {
		t.Fatalf("%d messages read, %d damaged, of %d", len(got), len(inBlock), n)
	}

	// Most messages acked: compaction would rewrite the segment, meets
	// the damage and leaves it as it is; the store goes on.
	del := &store.Batch{}
	for i, id := range ids {
		if !slices.Contains(inBlock, id) && i%10 != 0 {
			del.Deletes = append(del.Deletes, store.Ref{Queue: 1, Seq: uint64(i + 1)})
		}
	}
	mustApply(t, s, del)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatalf("Compact over a damaged block: %v", err)
	}
	if _, bad := s.cp.damaged[locs[ids[0]].Seg]; !bad || !strings.Contains(logs.String(), "damaged block found by compaction") {
		t.Fatalf("compaction did not note the damaged segment:\n%s", logs.String())
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("store failed after damage: %v", err)
	}
	// The rest read back intact, also after the compaction round.
	var rest []store.MsgID
	for i, id := range ids {
		if i%10 == 0 && !slices.Contains(inBlock, id) {
			rest = append(rest, id)
		}
	}
	if err := s.LoadMessages(rest, func(int, *store.Message) {}); err != nil {
		t.Fatalf("LoadMessages of intact messages: %v", err)
	}
	// Every entry gone: the damaged segment goes with the last of them.
	all := &store.Batch{}
	for i := range ids {
		if i%10 == 0 || slices.Contains(inBlock, ids[i]) {
			all.Deletes = append(all.Deletes, store.Ref{Queue: 1, Seq: uint64(i + 1)})
		}
	}
	mustApply(t, s, all)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, files := segmentBytes(s); files != 0 {
		t.Fatalf("%d segment files left after every message was deleted", files)
	}
}

// walCase is one damaged WAL record, in the position classes recovery
// tells apart.
type walCase struct {
	name string
	// lose is the message whose publish record is damaged; checkpointed
	// says whether a checkpoint covers that record.
	lose         int
	checkpointed bool
	// atCommit takes the crash right after the checkpoint's index commit,
	// before it removed the WAL files it covered (so an earlier file the
	// checkpoint covers is still there).
	atCommit bool
	segSize  int64 // WAL file size: small ones put the record in an earlier file
	// open says whether the store opens without a repair.
	open bool
}

// TestWALDamagePositions flips a byte of one record's message body in the
// WAL at each position class, through the store. The publishes are of
// messages 0 … 9 to queue 1; message 3 is dead-lettered to queue 2 (a copy
// that refers to its body by id) and the source deleted after message 4.
// A record a checkpoint covers costs nothing (the store opens and
// everything is there); the torn tail of the last file loses only the
// last record, never confirmed; anything else refuses to open, naming the
// file, offset and record, and after wal.Repair the store opens with only
// that record's effect gone: its message, and the copy of it another
// record put in queue 2 (dropped as lost, not left pointing at nothing).
func TestWALDamagePositions(t *testing.T) {
	cases := []walCase{
		{name: "middle of the last file, before the checkpoint", lose: 3, checkpointed: true, segSize: 64 << 10, open: true},
		{name: "middle of the last file, after the checkpoint", lose: 3, segSize: 64 << 10},
		{name: "torn tail of the last file", lose: 9, segSize: 64 << 10, open: true},
		{name: "earlier file, before the checkpoint", lose: 0, checkpointed: true, atCommit: true, segSize: 4096, open: true},
		{name: "earlier file, after the checkpoint", lose: 0, segSize: 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { walDamage(t, c) })
	}
}

func walDamage(t *testing.T, c walCase) {
	mem := vfs.NewCrashableMem()
	var logs logTo
	opts := Options{FS: mem, Logger: slog.New(slog.NewTextHandler(&logs, nil)), CheckpointBytes: 1 << 40, WALSegmentSize: c.segSize}
	s := openDir(t, "data", opts)
	msgs := make([]*store.Message, 10)
	publish := func(i int) {
		msgs[i] = &store.Message{ID: s.AllocMsgID(), Body: distinctBody(i, 900), Persistent: true}
		mustApply(t, s, &store.Batch{Messages: msgs[i : i+1], Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: uint64(i + 1)}, Msg: msgs[i]}}})
	}
	for i := range 5 {
		publish(i)
	}
	// Message 3 dead-lettered to queue 2: its copy refers to its body.
	mustApply(t, s, &store.Batch{Messages: msgs[3:4], Puts: []store.Entry{{Ref: store.Ref{Queue: 2, Seq: 1}, Msg: msgs[3]}},
		Deletes: []store.Ref{{Queue: 1, Seq: 4}}})
	var fs *vfs.MemFS
	published := 10
	if c.checkpointed {
		if c.atCommit {
			s.cp.afterCommit = func() {
				fs = mem.CrashClone(vfs.CrashCloneCfg{})
				s.cp.afterCommit = nil // Close checkpoints too
			}
			published = 5
		}
		if err := s.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 5; i < 10; i++ {
		publish(i)
	}
	// Power off: the WAL keeps what the checkpoint did not move.
	if fs == nil {
		fs = mem.CrashClone(vfs.CrashCloneCfg{})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.FS = fs
	names, _ := fs.List("data/wal")
	var walFiles []string
	for _, n := range names {
		if strings.HasSuffix(n, ".wal") {
			walFiles = append(walFiles, fs.PathJoin("data/wal", n))
		}
	}
	slices.Sort(walFiles)
	body := distinctBody(c.lose, 900)
	var path string
	var at int
	for _, p := range walFiles {
		if i := bytes.Index(memRead(t, fs, p), body); i >= 0 {
			path, at = p, i+len(body)/2
		}
	}
	if path == "" {
		t.Fatalf("message %d's record is in no WAL file (%v)", c.lose, walFiles)
	}
	if last := path == walFiles[len(walFiles)-1]; last != strings.Contains(c.name, "last file") {
		t.Fatalf("message %d's record is in %s; the case wants it in the last file: %v", c.lose, path, last)
	}
	b := memRead(t, fs, path)
	b[at] ^= 0x01
	memWrite(t, fs, path, b)

	lost := map[int]bool{c.lose: !c.checkpointed}
	s, err := Open("data", opts)
	if !c.open {
		var ce *wal.CorruptError
		if !errors.As(err, &ce) || ce.File != path || ce.FirstLSN == 0 || ce.FirstLSN != ce.LastLSN || ce.IntactAfter == 0 {
			if err == nil {
				s.Close()
			}
			t.Fatalf("Open = %v, want a *wal.CorruptError in %s losing one record", err, path)
		}
		rep, err := wal.Check(fs, "data/wal", wal.LSN(0))
		if err != nil {
			t.Fatal(err)
		}
		// The store's checkpoint LSN is what brokerd repair passes;
		// the damage is beyond it in these cases.
		if _, err := wal.Repair(fs, "data/wal", 0, rep); err != nil {
			t.Fatalf("Repair: %v", err)
		}
		s = openDir(t, "data", opts)
	} else if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { s.Close() }()
	// What is left: every message but the one lost (when it was lost),
	// and the copy in queue 2 only if message 3 was not.
	var want, got []string
	for i := range published {
		if i != 3 && !lost[i] {
			want = append(want, fmt.Sprintf("1/%d=%d", i+1, i))
		}
	}
	if !lost[3] {
		want = append(want, "2/1=3")
	}
	for _, q := range []store.QueueID{1, 2} {
		metas, err := s.ReadEntries(q, 0, 0, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]store.MsgID, len(metas))
		for i := range metas {
			ids[i] = metas[i].Msg
		}
		err = s.LoadMessages(ids, func(i int, m *store.Message) {
			var k int
			fmt.Sscanf(string(m.Body), "<body of message %06d>", &k)
			if !bytes.Equal(m.Body, distinctBody(k, 900)) {
				t.Errorf("message %d's body is wrong", k)
			}
			got = append(got, fmt.Sprintf("%d/%d=%d", q, metas[i].Seq, k))
		})
		if err != nil {
			t.Fatalf("LoadMessages of queue %d: %v", q, err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries after recovery %v, want %v\n%s", got, want, logs.String())
	}
	if lost[3] && !strings.Contains(logs.String(), "dropping an entry whose message was in a dropped WAL record") {
		t.Errorf("the dangling copy was not logged:\n%s", logs.String())
	}
	// The store takes writes after it.
	publish(0)
}

// indexTables returns the sstables of the store's index on fs.
func indexTables(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(fs.PathJoin(dir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			out = append(out, fs.PathJoin(dir, "index", n))
		}
	}
	return out
}

// TestDamagedIndexTable: a flipped byte in an index sstable. Open refuses,
// with an *index.CorruptionError naming the file (it checks every block
// before serving); damage that appears while the store runs fails the
// store with the file named, at the read that meets it, instead of taking
// the process down.
func TestDamagedIndexTable(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs, Logger: slog.New(slog.DiscardHandler), CheckpointBytes: 1 << 40, IndexCacheBytes: 1 << 20}
	s := openDir(t, "data", opts)
	b := &store.Batch{}
	for i := range 5000 {
		m := &store.Message{ID: s.AllocMsgID(), Body: []byte("m"), Persistent: true}
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 7, Seq: uint64(i + 1)}, Msg: m})
	}
	mustApply(t, s, b)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// In place: the open index holds its files open.
	flip := func(path string) {
		data := memRead(t, fs, path)
		f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{data[len(data)/3] ^ 0x04}, int64(len(data)/3)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	tables := indexTables(t, fs, "data")
	if len(tables) == 0 {
		t.Fatal("the index has no sstable")
	}
	// While running: verified at open, then damaged.
	s = openDir(t, "data", opts)
	for _, p := range tables {
		flip(p)
	}
	// Read every key kind the table holds: entries, message records.
	metas, err := s.ReadEntries(7, 0, 0, 5000, nil)
	if err == nil {
		ids := make([]store.MsgID, len(metas))
		for i := range metas {
			ids[i] = metas[i].Msg
		}
		err = s.LoadMessages(ids, func(int, *store.Message) {})
	}
	if err == nil {
		t.Fatal("reads over a damaged table succeeded")
	}
	var ce *index.CorruptionError
	// The failure is recorded off the reading goroutine
	// (index.OnCorruption); fail wakes cpDone's waiters.
	for done := s.cpDoneCh(); s.Sync() == nil; done = s.cpDoneCh() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the store did not fail")
		}
	}
	if serr := s.Sync(); !errors.As(serr, &ce) || !slices.Contains(tables, ce.File) {
		t.Fatalf("store error %v, want an *index.CorruptionError naming one of %v", serr, tables)
	}
	s.Close()
	// At the next start: refused, naming the file, before serving.
	_, err = Open("data", opts)
	if !errors.As(err, &ce) || !slices.Contains(tables, ce.File) {
		t.Fatalf("Open = %v, want an *index.CorruptionError naming one of %v", err, tables)
	}
}
