package diskstore

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() Options {
	return Options{Logger: slog.New(slog.DiscardHandler)}
}

func openDir(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// The conformance suite's ScanDeadlines case runs on the disk store.
var _ storetest.DeadlineScanner = (*Store)(nil)

// conformance runs the store suite with opts; every reopen is a clean
// Close and Open of the same directory.
func conformance(t *testing.T, opts Options) {
	storetest.Run(t,
		func(t *testing.T) store.Store {
			dir := t.TempDir()
			return openDir(t, dir, opts)
		},
		func(t *testing.T, s store.Store) store.Store {
			ds := s.(*Store)
			dir := ds.dir
			if err := ds.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			return openDir(t, dir, opts)
		})
}

func TestConformance(t *testing.T) { conformance(t, quiet()) }

// TestConformanceEveryBatchCheckpointed checkpoints after every batch, so
// the reads come from segments and the index rather than the overlay.
func TestConformanceEveryBatchCheckpointed(t *testing.T) {
	o := quiet()
	o.CheckpointBytes = 1
	conformance(t, o)
}

// model is a memstore fed the same batches, the reference the disk store
// must agree with.
type pair struct {
	t     *testing.T
	fs    vfs.FS
	dir   string
	opts  Options
	disk  *Store
	model *memstore.Store
	rng   *rand.Rand

	live   map[store.Ref]*store.Message
	seq    map[store.QueueID]uint64
	queues []store.QueueID
}

func newPair(t *testing.T, fs vfs.FS, seed uint64) *pair {
	p := &pair{t: t, fs: fs, dir: "data", model: memstore.New(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		live: make(map[store.Ref]*store.Message), seq: make(map[store.QueueID]uint64)}
	p.opts = quiet()
	p.opts.FS = fs
	p.opts.CheckpointBytes = 1 << 40 // checkpoints only when the test says
	p.opts.WALSegmentSize = 64 << 10
	p.disk = openDir(t, p.dir, p.opts)
	p.queues = []store.QueueID{1, 2, 3, 4}
	return p
}

func (p *pair) apply(b *store.Batch) {
	p.t.Helper()
	for _, s := range []store.Store{p.disk, p.model} {
		errc := make(chan error, 1)
		s.Apply(b, func(err error) { errc <- err })
		if err := <-errc; err != nil {
			p.t.Fatalf("apply to %T: %v", s, err)
		}
	}
}

func (p *pair) newMsg() *store.Message {
	id := p.disk.AllocMsgID()
	p.model.AllocMsgID()
	size := p.rng.IntN(3000)
	if p.rng.IntN(10) == 0 {
		size = 70 << 10 // larger than a segment block
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + (int(id)+i/7)%26)
	}
	return &store.Message{ID: id, Body: body, Persistent: true,
		Header: store.Header{Exchange: fmt.Sprint("x", id%3), RoutingKeys: []string{fmt.Sprint("rk", id), "cc"}, Props: []byte{0x10, 0, byte(id)}}}
}

func (p *pair) nextRef(q store.QueueID) store.Ref {
	p.seq[q]++
	return store.Ref{Queue: q, Prio: uint8(p.rng.IntN(3)), Seq: p.seq[q]}
}

func (p *pair) someLive() (store.Ref, bool) {
	if len(p.live) == 0 {
		return store.Ref{}, false
	}
	refs := make([]store.Ref, 0, len(p.live))
	for r := range p.live {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b store.Ref) int {
		if a.Queue != b.Queue {
			return int(a.Queue) - int(b.Queue)
		}
		return int(a.Seq) - int(b.Seq)
	})
	return refs[p.rng.IntN(len(refs))], true
}

// step applies one random operation.
func (p *pair) step() {
	switch op := p.rng.IntN(10); {
	case op < 4: // publish to one to three queues
		m := p.newMsg()
		b := &store.Batch{Messages: []*store.Message{m}}
		n := 1 + p.rng.IntN(3)
		for _, q := range p.queues[:n] {
			r := p.nextRef(q)
			var dl int64
			if p.rng.IntN(3) == 0 {
				dl = int64(1000 + p.rng.IntN(1000))
			}
			e := store.Entry{Ref: r, Msg: m, Deadline: dl}
			if p.rng.IntN(4) == 0 { // a waiting retry, paged out
				e.DeliveryCount, e.AcquiredCount, e.ReadyAt = 1, uint32(1+p.rng.IntN(3)), int64(2000+p.rng.IntN(1000))
			}
			b.Puts = append(b.Puts, e)
			p.live[r] = m
		}
		p.apply(b)
	case op < 6: // ack
		if r, ok := p.someLive(); ok {
			delete(p.live, r)
			p.apply(&store.Batch{Deletes: []store.Ref{r}})
		}
	case op < 8: // dead-letter to one or two queues, body not copied
		if r, ok := p.someLive(); ok {
			m := p.live[r]
			delete(p.live, r)
			h := &store.Header{Exchange: "dlx", RoutingKeys: []string{"dead"}, Props: []byte{0x30, 0, 1, 2}}
			b := &store.Batch{Messages: []*store.Message{m}, Deletes: []store.Ref{r}}
			for _, q := range p.queues[2 : 3+p.rng.IntN(2)] {
				t := p.nextRef(q)
				b.Puts = append(b.Puts, store.Entry{Ref: t, Msg: m, Header: h})
				p.live[t] = m
			}
			p.apply(b)
		}
	case op < 9: // update
		if r, ok := p.someLive(); ok {
			u := store.Update{Ref: r, DeliveryCount: uint32(p.rng.IntN(9)), DeadLetter: []string{"", "rejected"}[p.rng.IntN(2)], DeadAt: int64(p.rng.IntN(1e6))}
			if p.rng.IntN(2) == 0 { // a requeue into a retry delay
				u.AcquiredCount, u.ReadyAt = uint32(p.rng.IntN(9)), int64(p.rng.IntN(1e6))
			}
			p.apply(&store.Batch{Updates: []store.Update{u}})
		}
	default: // definitions
		k := fmt.Sprintf("q/%d\x00name\xff", p.rng.IntN(5))
		var v []byte
		if p.rng.IntN(3) > 0 {
			v = []byte(fmt.Sprint("def", p.rng.IntN(100)))
		}
		p.apply(&store.Batch{Meta: []store.MetaOp{{Key: k, Value: v}}})
	}
}

// dropQueue drops a queue with all its entries.
func (p *pair) dropQueue(q store.QueueID) {
	for r := range p.live {
		if r.Queue == q {
			delete(p.live, r)
		}
	}
	p.apply(&store.Batch{DropQueues: []store.QueueID{q}})
	for i, x := range p.queues {
		if x == q {
			p.queues[i] = store.QueueID(100 + len(p.seq)) // ids are never reused
			break
		}
	}
}

func snapshot(t *testing.T, s interface {
	store.Store
	storetest.DeadlineScanner
}, queues []store.QueueID) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range queues {
		last, err := s.LastSeq(q)
		if err != nil {
			t.Fatalf("last seq %d: %v", q, err)
		}
		fmt.Fprintf(&sb, "queue %d last %d\n", q, last)
		err = s.ScanQueue(q, 0, func(e *store.Entry) bool {
			h := e.EffectiveHeader()
			fmt.Fprintf(&sb, "  %d/%d msg %d body %d:%x dl %d dc %d ac %d ready %d %q@%d hdr %q %q %x persistent %v\n",
				e.Prio, e.Seq, e.Msg.ID, len(e.Msg.Body), hash(e.Msg.Body), e.Deadline, e.DeliveryCount, e.AcquiredCount, e.ReadyAt,
				e.DeadLetter, e.DeadAt, h.Exchange, h.RoutingKeys, h.Props, e.Msg.Persistent)
			return true
		})
		if err != nil {
			t.Fatalf("scan %d: %v", q, err)
		}
	}
	pagingSnapshot(t, s, queues, &sb)
	err := s.ScanMeta("", func(k string, v []byte) bool {
		fmt.Fprintf(&sb, "meta %q=%q\n", k, v)
		return true
	})
	if err != nil {
		t.Fatalf("scan meta: %v", err)
	}
	err = s.ScanDeadlines(1500, func(e *store.Entry) bool {
		fmt.Fprintf(&sb, "deadline %d %d/%d\n", e.Deadline, e.Queue, e.Seq)
		return true
	})
	if err != nil {
		t.Fatalf("scan deadlines: %v", err)
	}
	return sb.String()
}

// pagingSnapshot writes what the paging reads see: every queue's state,
// every level read in windows of 3, and the windows' messages loaded by
// id. It checks that each level's counters match its entries.
func pagingSnapshot(t *testing.T, s store.Store, queues []store.QueueID, sb *strings.Builder) {
	t.Helper()
	states := make(map[store.QueueID]store.QueueState)
	err := s.Queues(func(q store.QueueID, st store.QueueState) bool {
		states[q] = st
		fmt.Fprintf(sb, "state %d last %d", q, st.LastSeq)
		for _, l := range st.Levels {
			fmt.Fprintf(sb, " %d:%d/%d", l.Prio, l.Count, l.Bytes)
		}
		sb.WriteByte('\n')
		return true
	})
	if err != nil {
		t.Fatalf("queues: %v", err)
	}
	var ids []store.MsgID
	var refs []store.Ref
	for _, q := range queues {
		for prio := range uint8(3) {
			var count, bytes int64
			var from uint64
			for {
				ms, err := s.ReadEntries(q, prio, from, 3, nil)
				if err != nil {
					t.Fatalf("read entries %d/%d from %d: %v", q, prio, from, err)
				}
				for _, m := range ms {
					hdr := "-"
					if m.Header != nil {
						hdr = fmt.Sprintf("%q %q %x", m.Header.Exchange, m.Header.RoutingKeys, m.Header.Props)
					}
					fmt.Fprintf(sb, "  window %d/%d/%d msg %d size %d dl %d dc %d ac %d ready %d %q@%d hdr %s\n",
						m.Queue, m.Prio, m.Seq, m.Msg, m.Size, m.Deadline, m.DeliveryCount, m.AcquiredCount, m.ReadyAt, m.DeadLetter, m.DeadAt, hdr)
					ids = append(ids, m.Msg)
					refs = append(refs, m.Ref)
					count++
					bytes += int64(m.Size)
					from = m.Seq + 1
				}
				if len(ms) < 3 {
					break
				}
			}
			// A window from the middle of the queue's seqs.
			mid := states[q].LastSeq / 2
			ms, err := s.ReadEntries(q, prio, mid, 5, nil)
			if err != nil {
				t.Fatalf("read entries %d/%d from %d: %v", q, prio, mid, err)
			}
			for _, m := range ms {
				fmt.Fprintf(sb, "  from %d: %d/%d/%d size %d dc %d ac %d ready %d\n", mid, m.Queue, m.Prio, m.Seq, m.Size, m.DeliveryCount, m.AcquiredCount, m.ReadyAt)
			}
			var want store.LevelState
			for _, l := range states[q].Levels {
				if l.Prio == prio {
					want = l
				}
			}
			if want.Count != count || want.Bytes != bytes {
				t.Fatalf("%T: queue %d level %d counts %d entries / %d bytes, its entries %d / %d", s, q, prio, want.Count, want.Bytes, count, bytes)
			}
		}
	}
	// The same entries by ref, newest first (ReadRefs reads in any
	// order it is given).
	slices.Reverse(refs)
	byRef, err := s.ReadRefs(refs, nil)
	if err != nil {
		t.Fatalf("read refs: %v", err)
	}
	for _, m := range byRef {
		fmt.Fprintf(sb, "  ref %d/%d/%d msg %d size %d dl %d dc %d ac %d ready %d %q@%d origin %v\n",
			m.Queue, m.Prio, m.Seq, m.Msg, m.Size, m.Deadline, m.DeliveryCount, m.AcquiredCount, m.ReadyAt, m.DeadLetter, m.DeadAt, m.Origin)
	}
	loaded := make([]*store.Message, len(ids))
	err = s.LoadMessages(ids, func(i int, m *store.Message) { loaded[i] = m })
	if err != nil {
		t.Fatalf("load messages: %v", err)
	}
	for i, m := range loaded {
		if m == nil || m.ID != ids[i] {
			t.Fatalf("LoadMessages gave %+v for id %d", m, ids[i])
		}
		fmt.Fprintf(sb, "  load %d: %d:%x %q\n", m.ID, len(m.Body), hash(m.Body), m.Header.RoutingKeys)
	}
}

func hash(b []byte) uint32 {
	var h uint32 = 2166136261
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

func (p *pair) allQueues() []store.QueueID {
	var qs []store.QueueID
	for q := range p.seq {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

func (p *pair) check(when string) {
	p.t.Helper()
	qs := p.allQueues()
	got, want := snapshot(p.t, p.disk, qs), snapshot(p.t, p.model, qs)
	if got != want {
		p.t.Fatalf("%s: disk store and model differ\n--- disk\n%s\n--- model\n%s", when, got, want)
	}
}

func (p *pair) reopen() {
	p.t.Helper()
	if err := p.disk.Close(); err != nil {
		p.t.Fatalf("close: %v", err)
	}
	p.disk = openDir(p.t, p.dir, p.opts)
	p.model = p.model.Reopen()
}

// crash simulates power loss: only what was fsync'd survives. Every batch
// applied so far was confirmed, so all of it must be there.
func (p *pair) crash() {
	p.t.Helper()
	clone := p.fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{})
	if err := p.disk.Close(); err != nil {
		p.t.Fatalf("close: %v", err)
	}
	p.fs = clone
	p.opts.FS = clone
	p.disk = openDir(p.t, p.dir, p.opts)
	p.model = p.model.Reopen()
}

// checkpointUnderWork runs a checkpoint and, while it is stopped after
// freezing the overlay and again after committing the index batch (the
// instants where reads see a frozen overlay, and then one the index
// already holds), applies random operations and compares with the model.
func (p *pair) checkpointUnderWork(when string) {
	p.t.Helper()
	s := p.disk
	stage := make(chan string)     // a hook says where the checkpoint stopped
	resume := make(chan struct{})  // lets it go on
	abandon := make(chan struct{}) // closed when the test leaves: hooks return at once
	hook := func(name string) func() {
		return func() {
			select {
			case stage <- name:
			case <-abandon:
				return
			}
			select {
			case <-resume:
			case <-abandon:
			}
		}
	}
	s.cpMu.Lock()
	s.cp.afterFreeze, s.cp.afterCommit = hook("frozen"), hook("committed")
	s.cpMu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- s.Checkpoint() }()
	finished := false
	defer func() {
		close(abandon) // also when a check failed: the checkpoint must end before Close
		if !finished {
			<-errc
		}
		s.cpMu.Lock()
		s.cp.afterFreeze, s.cp.afterCommit = nil, nil
		s.cpMu.Unlock()
	}()
	for {
		var name string
		select {
		case name = <-stage:
		case err := <-errc:
			finished = true
			if err != nil {
				p.t.Fatalf("checkpoint: %v", err)
			}
			p.check(when + ": after a checkpoint under work")
			return
		}
		p.check(fmt.Sprintf("%s: checkpoint %s", when, name))
		for range 1 + p.rng.IntN(8) {
			p.step()
		}
		if p.rng.IntN(4) == 0 {
			p.dropQueue(p.queues[p.rng.IntN(len(p.queues))])
		}
		p.check(fmt.Sprintf("%s: checkpoint %s, after more batches", when, name))
		resume <- struct{}{}
	}
}

// TestModel applies random operations to the disk store and to memstore
// and compares their whole contents after checkpoints, compactions, clean
// restarts and crashes.
func TestModel(t *testing.T) {
	seeds := 4
	steps := 400
	if testing.Short() {
		seeds, steps = 2, 200
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			p := newPair(t, vfs.NewCrashableMem(), seed)
			defer func() { p.disk.Close() }()
			for i := range steps {
				p.step()
				switch r := p.rng.IntN(100); {
				case r < 5:
					if err := p.disk.Checkpoint(); err != nil {
						t.Fatalf("checkpoint: %v", err)
					}
					p.check(fmt.Sprintf("step %d after checkpoint", i))
				case r < 7:
					if err := p.disk.Compact(); err != nil {
						t.Fatalf("compact: %v", err)
					}
				case r < 9:
					p.reopen()
					p.check(fmt.Sprintf("step %d after reopen", i))
				case r < 11:
					p.crash()
					p.check(fmt.Sprintf("step %d after crash", i))
				case r < 12:
					p.dropQueue(p.queues[p.rng.IntN(len(p.queues))])
				case r < 15:
					p.checkpointUnderWork(fmt.Sprintf("step %d", i))
				}
			}
			p.check("end")
		})
	}
}
