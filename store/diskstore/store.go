package diskstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/internal/fsutil"
	"github.com/brokerd/brokerd/internal/histogram"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// Options configure a Store. Zero values take the defaults.
type Options struct {
	// FS is the filesystem (default vfs.Default); tests pass a crashable
	// in-memory one.
	FS vfs.FS
	// Sync is the WAL's sync policy (default wal.SyncFsync: a confirm
	// waits for the fsync that covers its record).
	Sync wal.SyncPolicy
	// SyncInterval is the fsync period under wal.SyncInterval.
	SyncInterval time.Duration
	// CheckpointBytes starts a checkpoint once the active overlay holds
	// this much (default 32 MiB). It bounds the memory the overlays hold
	// and the WAL replayed at start.
	CheckpointBytes int64
	// CheckpointInterval starts a checkpoint this long after the last one
	// when anything changed (default 30s), so a quiet broker restarts
	// with little to replay.
	CheckpointInterval time.Duration
	// WALSegmentSize is the size of each preallocated WAL file (default
	// 64 MiB).
	WALSegmentSize int64
	// CacheBytes is the segment block cache (default 32 MiB); IndexCacheBytes
	// Pebble's block cache (default 32 MiB).
	CacheBytes      int64
	IndexCacheBytes int64
	// CompactBelow compacts a segment whose live bytes fall below this
	// fraction of its size (default 0.5).
	CompactBelow float64
	Logger       *slog.Logger
	// MaxOpenFiles is the file descriptors the store may keep open
	// (default 1024): the index's table cache gets half of them (at
	// least the 74 Pebble insists on), segment read handles a quarter,
	// and the rest is left for the WAL, the segment writer, directories
	// and the index's log and manifest. brokerd reserves them out of
	// RLIMIT_NOFILE (internal/fdbudget).
	MaxOpenFiles int
	// FreeDescriptors, if set, says how many more descriptors the process
	// may open. A checkpoint that would find fewer than checkpointFDs is
	// not started (it fails, and is retried): Pebble treats a failure to
	// create its log file as fatal, so the store never starts one it may
	// not finish. brokerd sets it (fdbudget.Free).
	FreeDescriptors func() (int, error)
	// DiskFreeLimit is the free space below which, less what the store
	// is about to write, AlarmDisk is raised (space.go); 0: not watched.
	// DiskCheckInterval is how often the free space is sampled besides
	// after the store's own writes (default 1s).
	DiskFreeLimit     uint64
	DiskCheckInterval time.Duration
	// OnAlarm, if set, is called when the store raises or clears an
	// alarm (AlarmCheckpoint, AlarmWAL, AlarmDisk), from the store's goroutines, never under
	// its locks. brokerd hands it to the broker, which holds publishers
	// back while one is raised.
	OnAlarm func(resource string, raised bool)
	// RecoveryProgress, if set, is called by Open while it replays the
	// WAL, with the records replayed so far and the number to replay: at
	// the start, at each whole percent and at the end. It runs on the
	// goroutine that called Open (brokerd reports it to systemd as
	// STATUS=).
	RecoveryProgress func(done, total uint64)
	// ReplicaLog, if set, receives the replication groups' records (Raft
	// entries and hard states) Open finds in the WAL; see ReplicaLog. If
	// nil (a single node), such a record makes Open fail with
	// ErrNoReplicaLog.
	ReplicaLog ReplicaLog
	// Replication, if set, makes the store replicated: the state machine
	// of one Raft group, whose log is kept in the WAL (replicated.go;
	// doc.go, "Replicated mode"). Its Log replaces ReplicaLog.
	Replication *Replication
}

// withDefaults returns o with defaults filled in. Unlike wal's and
// segment's it has no error to return: the options that can be invalid
// (the WAL's segment size and sync policy) are checked by the wal.Open
// that Open's recovery calls.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = 32 << 20
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 30 * time.Second
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 32 << 20
	}
	if o.IndexCacheBytes <= 0 {
		o.IndexCacheBytes = 32 << 20
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = 1024
	}
	if o.WALSegmentSize <= 0 {
		o.WALSegmentSize = 64 << 20
	}
	if o.DiskCheckInterval <= 0 {
		o.DiskCheckInterval = time.Second
	}
	if o.CompactBelow <= 0 {
		o.CompactBelow = 0.5
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// The alarms a Store raises (Options.OnAlarm) while it retries something
// it cannot do for now — out of file descriptors or disk space, say.
// Nothing is lost meanwhile, and each clears by itself when a retry
// succeeds.
const (
	// AlarmCheckpoint: checkpoints fail. The WAL keeps every change.
	AlarmCheckpoint = "checkpoint"
	// AlarmWAL: the WAL cannot start its next file; records wait.
	AlarmWAL = "wal"
)

// Store is the durable store.Store. Safe for concurrent use.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	wal  *wal.WAL
	db   *pebble.DB
	segs *segment.Store

	nextID atomic.Uint64 // last message id given out

	rep *replState // a replicated store's own state; nil for a single node's

	// mu orders Apply: a batch's WAL append and its overlay change happen
	// together under it, so the overlay is the WAL in LSN order.
	mu     sync.Mutex
	closed bool
	err    error    // sticky
	active *overlay // changed by Apply
	frozen *overlay // being checkpointed; read-only; nil when none
	encBuf []byte
	fresh  []*store.Message // freshLocked's result, reused by Apply
	// dones holds the completions of Apply's records, in LSN order;
	// walDone, the WAL callback of every record, runs the oldest.
	dones   doneQueue
	walDone func(wal.LSN, error)
	// staleWake, when set (by tests), is called when the checkpointer
	// ignores a wake because the active overlay is not full.
	staleWake func()

	// afterGroup holds the functions AfterGroup was given during the
	// current group's completions; only the WAL's goroutine touches it.
	afterGroup []func()

	// segMu keeps a segment file from being removed while a reader that
	// looked up a location in it reads the blob.
	segMu sync.RWMutex

	// cpDone is closed (and replaced) when a checkpoint ends: Reserve
	// waits on it while the overlays are over their bound. Guarded by mu.
	cpDone chan struct{}

	// cpMu serialises checkpoints and compactions; cp is their state.
	cpMu     sync.Mutex
	cp       checkpointer
	kick     chan struct{} // wakes the checkpointer
	stop     chan struct{}
	stopped  chan struct{}
	closeMu  sync.Mutex
	closeErr error

	// stallKick gets a value when the WAL stalls (Close waits on it).
	stallKick chan struct{}

	// failLog spaces out the logs of failures the store retries.
	failLog logGate
	// cpFailures counts failed checkpoint attempts since Open; cpFailing
	// is set while checkpoints fail (the checkpoint alarm is raised),
	// diskLow while the disk alarm is.
	cpFailures atomic.Uint64
	cpFailing  atomic.Bool
	diskLow    atomic.Bool
	// force makes the checkpointer's next wake run a checkpoint even if
	// the overlay is not full (forceCheckpoint).
	force atomic.Bool
	space space

	// cpDuration observes each checkpoint that moved something (seconds);
	// recovery is how long Open took to recover. See Stats.
	cpDuration *histogram.Histogram
	recovery   time.Duration
}

// Open opens (or creates) the store in dir and recovers it: the index as
// of the last checkpoint, then the WAL records after it.
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	s := &Store{
		dir:       dir,
		opts:      opts,
		log:       opts.Logger,
		active:    newOverlay(),
		kick:      make(chan struct{}, 1),
		stallKick: make(chan struct{}, 1),
		space:     space{kick: make(chan struct{}, 1), stopped: make(chan struct{})},
		cpDone:    make(chan struct{}),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),

		cpDuration: histogram.New(CheckpointDurationBounds...),
	}
	s.walDone = s.completeRecord
	if r := opts.Replication; r != nil {
		if r.Group == 0 || r.Group >= 1<<16 || r.Log == nil {
			return nil, fmt.Errorf("diskstore: a replicated store needs a group in 1..65535 and a log (group %d)", r.Group)
		}
		s.opts.ReplicaLog = r.Log
		s.rep = &replState{commits: make(chan struct{})}
	}
	start := time.Now()
	if err := opts.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	// A directory entry is durable only once its parent is synced: a
	// crash right after the first start must not lose the whole store.
	if err := fsutil.SyncDir(opts.FS, filepath.Dir(dir)); err != nil {
		return nil, err
	}
	// An ingest a crash interrupted is finished (it committed) or dropped.
	if err := finishIngest(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("diskstore: finish a snapshot's ingest: %w", err)
	}
	if err := s.recover(dir); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.recovery = time.Since(start)
	s.space.limit.Store(opts.DiskFreeLimit)
	go s.checkpointLoop()
	go s.spaceLoop()
	if s.rep != nil {
		if err := s.dropVolatile(); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// alarm reports an alarm raised or cleared to Options.OnAlarm.
func (s *Store) alarm(resource string, raised bool) {
	if s.opts.OnAlarm != nil {
		s.opts.OnAlarm(resource, raised)
	}
}

// walStalled is the WAL's OnStall hook.
func (s *Store) walStalled(err error) {
	s.alarm(AlarmWAL, err != nil)
	if err != nil {
		select {
		case s.stallKick <- struct{}{}:
		default:
		}
	}
}

// logGate lets a repeated log line through about once a minute. Safe
// for concurrent use.
type logGate struct {
	mu   sync.Mutex
	last time.Time
}

func (g *logGate) allow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Sub(g.last) >= time.Minute {
		g.last = now
		return true
	}
	return false
}

func (s *Store) closeFiles() {
	if s.wal != nil {
		s.wal.Close()
	}
	if s.segs != nil {
		s.segs.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
}

func subdir(dir, name string) string { return filepath.Join(dir, name) }

// AllocMsgID implements store.Store.
func (s *Store) AllocMsgID() store.MsgID { return store.MsgID(s.nextID.Add(1)) }

// Apply implements store.Store. It encodes b and appends it to the WAL
// without waiting for I/O; done runs on the WAL's goroutine after the fsync
// that covers the record (under the fsync sync policy).
func (s *Store) Apply(b *store.Batch, done func(error)) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		if done != nil {
			done(err)
		}
		return
	}
	fresh := s.freshLocked(b)
	volatile := volatileOnly(b)
	if s.rep != nil && !volatile {
		s.applyReplicatedLocked(b, fresh, done)
		full := s.active.bytes >= s.opts.CheckpointBytes
		s.releaseFreshLocked(fresh)
		s.mu.Unlock()
		if w := s.opts.Replication.Wake; w != nil {
			w()
		}
		if full {
			s.wake()
		}
		return
	}
	s.encBuf = encodeRecord(s.encBuf[:0], b, fresh)
	class := wal.Durable
	if volatile {
		class = wal.Volatile
	}
	s.dones.push(done) // before Append: the WAL may complete the record at once
	lsn := s.wal.Append(s.encBuf, class, s.walDone)
	pos := uint64(lsn)
	if s.rep != nil {
		s.rep.pos++
		pos = s.rep.pos
	}
	s.active.apply(b, fresh, pos)
	s.spaceAppended(len(s.encBuf))
	full := s.active.bytes >= s.opts.CheckpointBytes
	if cap(s.encBuf) > 1<<20 {
		s.encBuf = nil // don't pin a huge buffer after one big message
	}
	s.releaseFreshLocked(fresh)
	s.mu.Unlock()
	if full {
		s.wake()
	}
}

// releaseFreshLocked keeps freshLocked's slice for the next Apply.
func (s *Store) releaseFreshLocked(fresh []*store.Message) {
	if cap(fresh) <= 1024 { // reused under s.mu: nothing keeps the slice
		clear(fresh)
		s.fresh = fresh[:0]
	}
}

// completeRecord is the WAL's callback for a record Apply appended: the
// WAL runs one per record, in LSN order, on its goroutine, so the record
// is the one whose completion s.dones holds oldest. (One func for every
// record: a closure each cost an allocation per store operation.)
func (s *Store) completeRecord(_ wal.LSN, err error) {
	done := s.dones.pop()
	if err != nil {
		s.fail(err)
	}
	if done != nil {
		done(err)
	}
}

// doneQueue is a FIFO of completions, safe for concurrent use.
type doneQueue struct {
	mu   sync.Mutex
	ring []func(error) // length a power of two (or 0)
	head int
	n    int
}

func (q *doneQueue) push(f func(error)) {
	q.mu.Lock()
	if q.n == len(q.ring) {
		ring := make([]func(error), max(64, 2*len(q.ring)))
		for i := range q.n {
			ring[i] = q.ring[(q.head+i)&(len(q.ring)-1)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = f
	q.n++
	q.mu.Unlock()
}

// pop removes and returns the oldest completion. It panics when empty:
// the WAL completed a record Apply did not append.
func (q *doneQueue) pop() func(error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		panic("diskstore: a WAL completion with no record waiting for it")
	}
	f := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.n--
	return f
}

// volatileOnly reports whether b changes volatile queues only: its record
// is written as a Volatile one (no fsync waited for, not replayed).
func volatileOnly(b *store.Batch) bool {
	if len(b.Meta) > 0 {
		return false
	}
	for i := range b.Puts {
		if !b.Puts[i].Queue.Volatile() {
			return false
		}
	}
	for i := range b.Updates {
		if !b.Updates[i].Queue.Volatile() {
			return false
		}
	}
	for _, r := range b.Deletes {
		if !r.Queue.Volatile() {
			return false
		}
	}
	for _, q := range b.DropQueues {
		if !q.Volatile() {
			return false
		}
	}
	return true
}

// withoutVolatile removes from b, a replayed durable record, what it
// changes in volatile queues: those changes may name entries of Volatile
// records that were not replayed.
func withoutVolatile(b *store.Batch) {
	b.Puts = slices.DeleteFunc(b.Puts, func(e store.Entry) bool { return e.Queue.Volatile() })
	b.Updates = slices.DeleteFunc(b.Updates, func(u store.Update) bool { return u.Queue.Volatile() })
	b.Deletes = slices.DeleteFunc(b.Deletes, func(r store.Ref) bool { return r.Queue.Volatile() })
	b.DropQueues = slices.DeleteFunc(b.DropQueues, func(q store.QueueID) bool { return q.Volatile() })
}

// freshLocked returns the messages of b whose bodies the record must
// carry: listed, referred to by one of b's puts, and not stored before. It
// marks them stored.
func (s *Store) freshLocked(b *store.Batch) []*store.Message {
	fresh := s.fresh[:0]
	var put map[store.MsgID]bool // ids the puts refer to, for large batches (a tx commit)
	if len(b.Messages) > 8 {
		put = make(map[store.MsgID]bool, len(b.Puts))
		for i := range b.Puts {
			put[b.Puts[i].Msg.ID] = true
		}
	}
	for _, m := range b.Messages {
		if m.Stored.Load() {
			continue
		}
		if put != nil && !put[m.ID] || put == nil && !referenced(b, m) {
			continue
		}
		m.Stored.Store(true)
		fresh = append(fresh, m)
	}
	return fresh
}

func referenced(b *store.Batch, m *store.Message) bool {
	for i := range b.Puts {
		if b.Puts[i].Msg.ID == m.ID {
			return true
		}
	}
	return false
}

func (s *Store) usableLocked() error {
	if s.closed {
		return store.ErrClosed
	}
	return s.err
}

// fail records the first failure: it sticks.
func (s *Store) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		s.log.Error("store failed; no further changes are accepted", "err", err)
		close(s.cpDone) // Reserve calls waiting for a checkpoint see the error
		s.cpDone = make(chan struct{})
	}
	s.mu.Unlock()
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(q store.QueueID) (uint64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, store.ErrClosed
	}
	for _, o := range []*overlay{s.active, s.frozen} { // newest first
		if o == nil {
			continue
		}
		if oq := o.queues[q]; oq != nil && (oq.lastSeq > 0 || oq.dropped) {
			s.mu.Unlock()
			return oq.lastSeq, nil
		}
	}
	s.mu.Unlock()
	st, err := s.queueState(q)
	return st.LastSeq, err
}

func (s *Store) queueState(q store.QueueID) (index.QueueState, error) {
	var st index.QueueState
	v, closer, err := s.db.Get(index.QueueStateKey(nil, uint64(q)))
	if errors.Is(err, pebble.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read queue %d state: %w", q, err)
	}
	defer closer.Close()
	if err := index.DecodeQueueState(v, &st); err != nil {
		return st, fmt.Errorf("read queue %d state: %w", q, err)
	}
	return st, nil
}

// beginClose marks the store closed and reports whether it was open: the
// first Close or Abandon does the closing, later ones return its result.
// Under closeMu.
func (s *Store) beginClose() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed = true
	return true
}

// Close implements store.Store: it checkpoints what the WAL holds (so the
// next start replays little), then closes the WAL, segments and index.
// Idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if !s.beginClose() {
		return s.closeErr
	}
	s.checkpointEnded() // Reserve calls waiting for a checkpoint see the store closed
	close(s.stop)
	// A checkpoint under way waits for the WAL; a stalled WAL (it cannot
	// start a file) is told to give up, or Close would wait for the disk.
	<-s.space.stopped
	for waiting := true; waiting; {
		if s.wal.Stalled() != nil {
			s.wal.Close()
			<-s.stopped
			break
		}
		select {
		case <-s.stopped:
			waiting = false
		case <-s.stallKick:
		}
	}
	var errs []error
	// cpMu: a snapshot being made (CreateSnapshot) finishes first.
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	if s.err == nil && s.wal.Err() == nil {
		if err := s.checkpointLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.wal.Close(), s.segs.Close(), s.db.Close())
	s.closeErr = errors.Join(errs...)
	return s.closeErr
}

var _ store.Store = (*Store)(nil)

// Sync returns once every batch whose Apply returned before the call is
// durable and its completions have run, AfterGroup hooks included (the
// publisher confirms they record are handed to their connections'
// writers, which send them before they close), whatever
// the sync policy. brokerd calls it at shutdown, before it closes the
// connections, and as the watchdog's check that the store's goroutine
// makes progress. Safe for concurrent use.
func (s *Store) Sync() error {
	s.mu.Lock()
	err := s.usableLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// The WAL answers a Sync among the completions of its group, before
	// the group's AfterGroup hooks; a second Sync is a group of its own,
	// written only after those hooks ran.
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("sync wal: %w", err)
	}
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("sync wal: %w", err)
	}
	return nil
}

// Dir returns the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// AfterGroup runs fn on the WAL's goroutine once the completions of the
// current group commit have all run, before the next group is written.
// Call it only from inside a done callback that reported success. The
// broker uses it to send one coalesced publisher confirm per channel per
// fsync instead of one per message.
func (s *Store) AfterGroup(fn func()) {
	if s.rep != nil {
		// Completions run on the WAL's goroutine and the Raft loop's.
		s.rep.afterMu.Lock()
		defer s.rep.afterMu.Unlock()
	}
	s.afterGroup = append(s.afterGroup, fn)
}

// runAfterGroup is the WAL's AfterGroup hook, and a replicated store's
// EndGroup.
func (s *Store) runAfterGroup() {
	if s.rep != nil {
		s.rep.afterMu.Lock()
		fns := s.afterGroup
		s.afterGroup = nil
		s.rep.afterMu.Unlock()
		for _, fn := range fns {
			fn()
		}
		return
	}
	for i, fn := range s.afterGroup {
		fn()
		s.afterGroup[i] = nil
	}
	s.afterGroup = s.afterGroup[:0]
}

// EndGroup runs the AfterGroup hooks the completions Committed ran have
// left: the Raft loop calls it once per cycle, after its commits.
func (s *Store) EndGroup() { s.runAfterGroup() }

// Reserve implements store.Store. It waits while the WAL has more than its
// bound queued for writing (a disk slower than the publishers), and while
// the active overlay holds more than twice CheckpointBytes (checkpoints
// slower than the publishers): memory stays bounded by configuration.
// While an alarm of the store's is raised (a checkpoint or the WAL cannot
// make progress) it does not wait: the alarm holds publishers instead,
// with connection.blocked, at their next publish.
func (s *Store) Reserve(ctx context.Context, n int) error {
	if err := s.wal.Reserve(ctx, n); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.active.bytes >= 2*s.opts.CheckpointBytes && !s.cpFailing.Load() && !s.diskLow.Load() {
		if err := s.usableLocked(); err != nil {
			return err
		}
		done := s.cpDone
		s.mu.Unlock()
		s.wake()
		select {
		case <-done:
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		}
		s.mu.Lock()
	}
	return s.usableLocked()
}

// checkpointEnded wakes the Reserve calls waiting for a checkpoint.
func (s *Store) checkpointEnded() {
	s.mu.Lock()
	close(s.cpDone)
	s.cpDone = make(chan struct{})
	s.mu.Unlock()
}
