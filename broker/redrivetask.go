package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// A redrive task runs a redrive in the background: paced by a rate,
// listed and watched while it runs, cancelled, and resumed after a
// restart. Its record (defs.PrefixRedriveTask) is rewritten in the same store batch
// as each move, so the counts it reports after a crash are exactly the
// moves that survived it; each failure is recorded with its message's
// seq (defs.PrefixRedriveFailure), so a resumed task neither retries nor
// recounts a message that already failed.

// Redrive task states.
const (
	RedriveRunning   = "running"
	RedriveFinished  = "finished"  // every matching message examined, or Max reached
	RedriveCancelled = "cancelled" // by CancelRedrive
	RedriveFailed    = "failed"    // the source queue was deleted, or the task could not run
)

const (
	// redriveListedFailures bounds the failures a task lists with their
	// seq; all are counted, by reason too.
	redriveListedFailures = 100
	// redriveKeptTasks bounds the ended tasks kept for listing; the
	// oldest are forgotten first.
	redriveKeptTasks = 100
	// redrivePaceSlice is how much of a second's rate a paced task moves
	// under one hold of the queue lock; a paced task that fell behind
	// (a slow read, a paused process) catches up by at most that much.
	redrivePaceSlice = 20
	// RedriveMinRate is the lowest rate a task takes, in messages a
	// second.
	RedriveMinRate = 0.001
)

// RedriveSpec is what a redrive task does.
type RedriveSpec struct {
	VHost, Queue string
	// User is whose permissions the task runs with, checked again when
	// it resumes after a restart; "" is the broker itself.
	User string
	queue.RedriveOptions
	// Rate is the most messages examined per second (moved or failed);
	// 0 or less is unpaced.
	Rate float64
}

// RedriveTask is a snapshot of a redrive task.
type RedriveTask struct {
	ID string
	RedriveSpec
	State    string
	Moved    int64
	Failed   int64
	Failures []queue.RedriveFailure // the first redriveListedFailures, in order
	// FailureReasons counts every failure by its reason.
	FailureReasons map[string]int64
	// Remaining is the ready messages in the source queue: now while the
	// task runs, when it ended otherwise.
	Remaining int64
	Error     string // why a failed task failed
	Created   time.Time
	Ended     time.Time // zero while running
}

// redriveTask is a task's live state. id, spec, cancel and done are fixed;
// mu guards the fields from state to upTo. mu is taken under the source
// queue's lock and VHost.mu shared by each move (noteMove, noteFailure),
// so it is never held while a queue or vhost lock is taken; only the
// store's locks are taken under it (the task's record is handed to Apply
// under it). The task's goroutine is the only writer of the counters.
type redriveTask struct {
	id     string
	spec   RedriveSpec
	cancel chan struct{} // closed by CancelRedrive
	done   chan struct{} // closed when the goroutine has exited

	mu         sync.Mutex
	state      string
	moved      int64
	failed     int64
	failures   []queue.RedriveFailure
	reasons    map[string]int64
	remaining  int64
	errText    string
	created    time.Time
	ended      time.Time
	failedSeqs map[uint64]bool // a resumed task's failures: not examined again
	q          *queue.Queue    // the source, while running
	queueID    store.QueueID   // the source's id: a queue of that name made later is another
	upTo       uint64          // the source's last seq when the task began: its bound
	// (end of mu's fields)
	cancelOnce sync.Once
}

// recordLocked encodes the task's record. Caller holds t.mu.
func (t *redriveTask) recordLocked() store.MetaOp {
	s := t.spec
	r := defs.RedriveTask{
		ID: t.id, VHost: s.VHost, Queue: s.Queue, User: s.User, Max: s.Max,
		ToExchange: s.ToExchange, Exchange: s.Exchange, RoutingKey: s.RoutingKey,
		Reason: s.Reason, SourceQueue: s.SourceQueue, MinAgeMS: s.MinAge.Milliseconds(), Rate: s.Rate,
		State: t.state, Moved: t.moved, Failed: t.failed,
		Remaining: t.remaining, UpTo: t.upTo, QueueID: uint64(t.queueID), Error: t.errText, Created: t.created.UnixMilli(),
	}
	if !t.ended.IsZero() {
		r.Ended = t.ended.UnixMilli()
	}
	return defs.EncodeRedriveTask(r)
}

// snapshot returns the task as it is now.
func (t *redriveTask) snapshot() RedriveTask {
	t.mu.Lock()
	q := t.q
	t.mu.Unlock()
	live := int64(-1)
	if q != nil { // t.mu is a leaf lock, taken under queue locks
		n, _ := q.ReadyLen()
		live = int64(n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	rem := t.remaining
	if t.state == RedriveRunning && live >= 0 {
		rem = live
	}
	return RedriveTask{
		ID: t.id, RedriveSpec: t.spec, State: t.state, Moved: t.moved, Failed: t.failed,
		Failures: slices.Clone(t.failures), FailureReasons: cloneCounts(t.reasons),
		Remaining: rem, Error: t.errText, Created: t.created, Ended: t.ended,
	}
}

func cloneCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// redrives is the broker's set of tasks; guarded by its mu, a leaf taken
// with no lock held (a task's snapshot is taken after it is released).
type redrives struct {
	mu    sync.Mutex
	tasks map[string]*redriveTask // mu
}

// StartRedrive starts a redrive task and returns its id; the task runs
// until every matching ready message of the queue has been examined once
// (or spec.Max of them), moving each as Redrive does. The queue (and the
// exchange, when one is named) must exist: the error wraps ErrNotFound
// otherwise, or is an *InvalidError for a bad spec. The task's record is
// durable before StartRedrive returns. The task examines the messages the
// queue holds when it starts (seq up to its last), not those that arrive
// later.
func (b *Broker) StartRedrive(spec RedriveSpec) (string, error) {
	if spec.Max < 0 || spec.MinAge < 0 || spec.Rate < 0 {
		return "", &InvalidError{Msg: "max, min_age and rate must not be negative"}
	}
	if spec.Rate > 0 && spec.Rate < RedriveMinRate {
		return "", &InvalidError{Msg: fmt.Sprintf("rate must be at least %g a second (0: unpaced)", RedriveMinRate)}
	}
	q, _, err := b.redriveSource(spec)
	if err != nil {
		return "", err
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("redrive task id: %w", err)
	}
	t := newRedriveTask(hex.EncodeToString(raw[:]), spec, b.env.Now())
	t.q, t.queueID, t.upTo = q, q.ID, q.Seq.Load()
	t.mu.Lock()
	w := b.env.StartWrite(&store.Batch{Meta: []store.MetaOp{t.recordLocked()}})
	t.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		return "", err
	}
	// Launched, or (the broker is closing) resumed at its next start.
	b.launchRedrive(t)
	return t.id, nil
}

func newRedriveTask(id string, spec RedriveSpec, now time.Time) *redriveTask {
	return &redriveTask{
		id: id, spec: spec, cancel: make(chan struct{}), done: make(chan struct{}),
		state: RedriveRunning, reasons: map[string]int64{}, created: now,
		failedSeqs: map[uint64]bool{},
	}
}

// launchRedrive registers t and starts its goroutine, one of those Close
// waits for; false once the broker is closing.
func (b *Broker) launchRedrive(t *redriveTask) bool {
	b.mu.RLock()
	closed := b.closed
	if !closed {
		b.wg.Add(1)
	}
	b.mu.RUnlock()
	b.redrives.mu.Lock()
	if b.redrives.tasks == nil {
		b.redrives.tasks = map[string]*redriveTask{}
	}
	b.redrives.tasks[t.id] = t
	b.redrives.mu.Unlock()
	if closed {
		close(t.done)
		return false
	}
	go b.runRedrive(t)
	return true
}

// redriveSource finds the task's queue and checks its exchange.
func (b *Broker) redriveSource(spec RedriveSpec) (*queue.Queue, bool, error) {
	v := b.VHost(spec.VHost)
	if v == nil {
		return nil, false, notFoundf("no vhost '%s'", spec.VHost)
	}
	toX := spec.ToExchange || spec.Exchange != ""
	v.mu.RLock()
	q := v.topo.Queues[spec.Queue]
	_, xok := v.topo.Exchanges[spec.Exchange]
	v.mu.RUnlock()
	if q == nil {
		return nil, toX, notFoundf("no queue '%s' in vhost '%s'", spec.Queue, spec.VHost)
	}
	if toX && !xok {
		return nil, toX, notFoundf("no exchange '%s' in vhost '%s'", spec.Exchange, spec.VHost)
	}
	return q, toX, nil
}

// RedriveTasks lists every task, oldest first.
func (b *Broker) RedriveTasks() []RedriveTask {
	b.redrives.mu.Lock()
	ts := make([]*redriveTask, 0, len(b.redrives.tasks))
	for _, t := range b.redrives.tasks {
		ts = append(ts, t)
	}
	b.redrives.mu.Unlock()
	out := make([]RedriveTask, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.snapshot())
	}
	slices.SortFunc(out, func(a, c RedriveTask) int {
		return cmp.Or(a.Created.Compare(c.Created), cmp.Compare(a.ID, c.ID))
	})
	return out
}

func (b *Broker) redriveTask(id string) (*redriveTask, error) {
	b.redrives.mu.Lock()
	t := b.redrives.tasks[id]
	b.redrives.mu.Unlock()
	if t == nil {
		return nil, notFoundf("no redrive task '%s'", id)
	}
	return t, nil
}

// RedriveTask returns one task; the error wraps ErrNotFound for an
// unknown id.
func (b *Broker) RedriveTask(id string) (RedriveTask, error) {
	t, err := b.redriveTask(id)
	if err != nil {
		return RedriveTask{}, err
	}
	return t.snapshot(), nil
}

// WaitRedrive waits until the task has ended (or ctx ends, or the broker
// closes under it) and returns it.
func (b *Broker) WaitRedrive(ctx context.Context, id string) (RedriveTask, error) {
	t, err := b.redriveTask(id)
	if err != nil {
		return RedriveTask{}, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return t.snapshot(), ctx.Err()
	}
	return t.snapshot(), nil
}

// CancelRedrive stops a running task after the move under way (moves
// already made stay) and returns once it has stopped and its state is
// recorded; an ended task is left as it is. The error wraps ErrNotFound
// for an unknown id.
func (b *Broker) CancelRedrive(id string) error {
	t, err := b.redriveTask(id)
	if err != nil {
		return err
	}
	t.mu.Lock()
	running := t.state == RedriveRunning
	t.mu.Unlock()
	if !running {
		return nil
	}
	t.cancelOnce.Do(func() { close(t.cancel) })
	<-t.done
	t.mu.Lock()
	stopped := t.state != RedriveRunning // still running: the broker closed first
	t.mu.Unlock()
	if !stopped {
		return fmt.Errorf("cancel redrive task '%s': broker closed", id)
	}
	return nil
}

// ForgetRedrive removes a task and its records, cancelling it first if it
// runs. The error wraps ErrNotFound for an unknown id.
func (b *Broker) ForgetRedrive(id string) error {
	if err := b.CancelRedrive(id); err != nil {
		return err
	}
	b.redrives.mu.Lock()
	delete(b.redrives.tasks, id)
	b.redrives.mu.Unlock()
	return b.forgetRedrive(id).WaitErr()
}

// RedriveMaxFailuresPage bounds a page of a task's failures in the API.
const RedriveMaxFailuresPage = 1000

// RedriveFailures returns up to count of a task's failures with seq >= from, in seq order, read from their
// records: every failure, where a task's snapshot lists the first
// redriveListedFailures. The error wraps ErrNotFound for an unknown id.
func (b *Broker) RedriveFailures(id string, from uint64, count int) ([]queue.RedriveFailure, error) {
	if _, err := b.redriveTask(id); err != nil {
		return nil, err
	}
	out := []queue.RedriveFailure{}
	var perr error
	err := b.env.Store.ScanMeta(defs.Key(defs.PrefixRedriveFailure, id), func(k string, v []byte) bool {
		if len(out) >= count {
			return false
		}
		f, err := defs.DecodeRedriveFailure(k, v)
		if err != nil {
			perr = err
			return false
		}
		if f.Seq >= from {
			out = append(out, queue.RedriveFailure{Seq: f.Seq, Reason: f.Reason})
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("read failures of redrive task '%s': %w", id, err)
	}
	return out, nil
}

// forgetRedrive deletes a task's record and failure records.
func (b *Broker) forgetRedrive(id string) *queue.StoreWrite {
	ops := []store.MetaOp{{Key: defs.Key(defs.PrefixRedriveTask, id)}}
	prefix := defs.Key(defs.PrefixRedriveFailure, id)
	err := b.env.Store.ScanMeta(prefix, func(k string, _ []byte) bool {
		ops = append(ops, store.MetaOp{Key: k})
		return true
	})
	if err != nil {
		b.env.Log.Warn("redrive: cannot list a forgotten task's failures", "task", id, "error", err)
	}
	return b.env.StartWrite(&store.Batch{Meta: ops})
}

// recoverRedrives reads the stored tasks (before the broker serves) and
// returns those to resume. Failures are read from their records: the
// listed ones and the counts by reason, and, of a task to resume, the
// seqs it must not examine again.
func (b *Broker) recoverRedrives() ([]*redriveTask, error) {
	var resume, all []*redriveTask
	var err error
	serr := b.env.Store.ScanMeta(defs.PrefixRedriveTask, func(k string, v []byte) bool {
		var r defs.RedriveTask
		if r, err = defs.DecodeRedriveTask(k, v); err != nil {
			return false
		}
		spec := RedriveSpec{VHost: r.VHost, Queue: r.Queue, User: r.User, Rate: r.Rate,
			RedriveOptions: queue.RedriveOptions{Max: r.Max, ToExchange: r.ToExchange, Exchange: r.Exchange,
				RoutingKey: r.RoutingKey, Reason: r.Reason, SourceQueue: r.SourceQueue,
				MinAge: time.Duration(r.MinAgeMS) * time.Millisecond}}
		t := newRedriveTask(r.ID, spec, time.UnixMilli(r.Created))
		t.state, t.moved, t.failed, t.remaining, t.errText = r.State, r.Moved, r.Failed, r.Remaining, r.Error
		t.upTo, t.queueID = r.UpTo, store.QueueID(r.QueueID)
		if r.Ended != 0 {
			t.ended = time.UnixMilli(r.Ended)
		}
		if t.state == RedriveRunning {
			resume = append(resume, t)
		} else {
			close(t.done)
			if b.redrives.tasks == nil {
				b.redrives.tasks = map[string]*redriveTask{}
			}
			b.redrives.tasks[t.id] = t
		}
		all = append(all, t)
		return true
	})
	if err == nil && serr != nil {
		err = fmt.Errorf("scan redrive tasks: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		running := t.state == RedriveRunning
		serr := b.env.Store.ScanMeta(defs.Key(defs.PrefixRedriveFailure, t.id), func(k string, v []byte) bool {
			d, perr := defs.DecodeRedriveFailure(k, v)
			if perr != nil {
				err = perr
				return false
			}
			seq := d.Seq
			f := queue.RedriveFailure{Seq: seq, Reason: d.Reason}
			t.reasons[f.Reason]++
			if len(t.failures) < redriveListedFailures {
				t.failures = append(t.failures, f)
			}
			if running {
				t.failedSeqs[seq] = true
			}
			return true
		})
		if err == nil && serr != nil {
			err = fmt.Errorf("scan redrive failures: %w", serr)
		}
		if err != nil {
			return nil, err
		}
	}
	return resume, nil
}

// runRedrive is a task's goroutine.
func (b *Broker) runRedrive(t *redriveTask) {
	defer b.wg.Done()
	defer close(t.done)
	state, why := b.driveTask(t)
	if state == RedriveRunning { // the broker is closing: resume next start
		return
	}
	t.mu.Lock()
	q := t.q
	t.mu.Unlock()
	remaining := int64(0)
	if q != nil {
		if n, deleted := q.ReadyLen(); !deleted {
			remaining = int64(n)
		}
	}
	t.mu.Lock()
	t.state, t.errText, t.ended, t.remaining, t.q = state, why, b.env.Now(), remaining, nil
	w := b.env.StartWrite(&store.Batch{Meta: []store.MetaOp{t.recordLocked()}})
	t.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.env.Log.Warn("redrive: cannot record the end of a task", "task", t.id, "error", err)
	}
	b.env.Log.Info("redrive task ended", "task", t.id, "vhost", t.spec.VHost, "queue", t.spec.Queue,
		"state", state, "moved", t.moved, "failed", t.failed, "error", why)
	b.pruneRedrives()
}

// pruneRedrives forgets the oldest ended tasks beyond redriveKeptTasks.
func (b *Broker) pruneRedrives() {
	var ended []RedriveTask
	for _, s := range b.RedriveTasks() {
		if s.State != RedriveRunning {
			ended = append(ended, s)
		}
	}
	for i := 0; i < len(ended)-redriveKeptTasks; i++ {
		b.redrives.mu.Lock()
		delete(b.redrives.tasks, ended[i].ID)
		b.redrives.mu.Unlock()
		if err := b.forgetRedrive(ended[i].ID).WaitErr(); err != nil {
			b.env.Log.Warn("redrive: cannot forget an old task", "task", ended[i].ID, "error", err)
		}
	}
}

// driveTask runs t until it ends and returns its end state and why, or
// RedriveRunning when the broker closes (or its store fails) first.
func (b *Broker) driveTask(t *redriveTask) (string, string) {
	q, toX, err := b.redriveSource(t.spec)
	if err != nil {
		return RedriveFailed, err.Error()
	}
	if q.ID != t.queueID {
		return RedriveFailed, fmt.Sprintf("queue '%s' in vhost '%s' deleted", t.spec.Queue, t.spec.VHost)
	}
	t.mu.Lock()
	t.q = q
	done := t.moved + t.failed
	t.mu.Unlock()
	run := &queue.Redrive{Queue: q, ToX: toX, Opts: t.spec.RedriveOptions, Task: t, Skip: t.failedSeqs, UpTo: t.upTo}
	want := int64(t.spec.Max)
	if want <= 0 {
		want = 1<<63 - 1
	}
	clock := b.opts.TimerClock
	if clock == nil {
		clock = ttl.RealClock
	}
	var timer ttl.ClockTimer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// The pace: the k-th message examined since start is due at
	// start + k/rate; chunks of rate/redrivePaceSlice.
	start, paced := clock.Now(), int64(0)
	slice := time.Duration(float64(time.Second) / redrivePaceSlice)
	chunk := queue.RedriveChunk
	if t.spec.Rate > 0 {
		chunk = max(1, min(queue.RedriveChunk, int(t.spec.Rate/redrivePaceSlice)))
	}
	for done < want {
		select {
		case <-t.cancel:
			return RedriveCancelled, ""
		case <-b.quit:
			return RedriveRunning, ""
		default:
		}
		if t.spec.Rate > 0 {
			now := clock.Now()
			due := start.Add(time.Duration(float64(paced) / t.spec.Rate * float64(time.Second)))
			if lag := now.Sub(due); lag > slice { // fell behind: no burst to catch up
				start = start.Add(lag - slice)
				due = due.Add(lag - slice)
			}
			if wait := due.Sub(now); wait > 0 {
				if timer == nil {
					timer = clock.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C():
				case <-t.cancel:
					return RedriveCancelled, ""
				case <-b.quit:
					return RedriveRunning, ""
				}
			}
		}
		if why := b.authorizeRedrive(t, run, toX); why != "" {
			return RedriveFailed, why
		}
		before := run.Res.Moved + run.Res.Failed
		progressed, wait, gone, err := run.Chunk(int(min(int64(chunk), want-done)))
		examined := int64(run.Res.Moved + run.Res.Failed - before)
		done += examined
		paced += examined
		switch {
		case err != nil:
			if b.env.StoreErr.Load() != nil {
				return RedriveRunning, "" // nothing more can be recorded: resume next start
			}
			return RedriveFailed, err.Error()
		case gone:
			return RedriveFailed, fmt.Sprintf("queue '%s' in vhost '%s' deleted", t.spec.Queue, t.spec.VHost)
		case wait != nil:
			select {
			case <-wait.Done:
			case <-t.cancel:
				return RedriveCancelled, ""
			case <-b.quit:
				return RedriveRunning, ""
			}
			if wait.Err != nil {
				return RedriveFailed, fmt.Sprintf("read paged messages: %v", wait.Err)
			}
		case !progressed || run.Exhausted:
			return RedriveFinished, ""
		}
		if b.env.StoreErr.Load() != nil {
			return RedriveRunning, ""
		}
	}
	return RedriveFinished, ""
}

// authorizeRedrive checks, before each chunk of a task's moves, that its
// user (if any) may still run it with the permissions it has now (a
// permission change or the user's deletion applies at once, as to open
// connections), and sets run's check of each origin queue; it returns why
// not, or "".
func (b *Broker) authorizeRedrive(t *redriveTask, run *queue.Redrive, toX bool) string {
	name, vhost := t.spec.User, t.spec.VHost
	if name == "" {
		return ""
	}
	b.mu.RLock()
	u, p := b.users[name], b.perms[permKey{user: name, vhost: vhost}]
	b.mu.RUnlock()
	switch {
	case u == nil:
		return fmt.Sprintf("user '%s' is deleted", name)
	case p == nil:
		return fmt.Sprintf("access to vhost '%s' refused for user '%s'", vhost, name)
	case !p.Allows(auth.Read, t.spec.Queue):
		return fmt.Sprintf("read access to queue '%s' in vhost '%s' refused for user '%s'", t.spec.Queue, vhost, name)
	}
	if toX {
		x := t.spec.Exchange
		if x == "" {
			x = "amq.default"
		}
		if !p.Allows(auth.Write, x) {
			return fmt.Sprintf("write access to exchange '%s' in vhost '%s' refused for user '%s'", x, vhost, name)
		}
		return ""
	}
	run.Allow = func(queue string) bool { return p.Allows(auth.Write, queue) }
	return ""
}

// NoteMove counts a move and adds the task's record to the move's
// batch. Caller holds the source queue's lock; t.mu is taken inside.
func (t *redriveTask) NoteMove(tx *queue.Txn) {
	t.mu.Lock()
	t.moved++
	tx.Batch.Meta = append(tx.Batch.Meta, t.recordLocked())
	t.mu.Unlock()
}

// NoteFailure counts a failure and adds its records to tx's batch.
func (t *redriveTask) NoteFailure(tx *queue.Txn, f queue.RedriveFailure) {
	t.mu.Lock()
	t.failed++
	t.reasons[f.Reason]++
	if len(t.failures) < redriveListedFailures {
		t.failures = append(t.failures, f)
	}
	tx.Batch.Meta = append(tx.Batch.Meta, defs.EncodeRedriveFailure(defs.RedriveFailure{Task: t.id, Seq: f.Seq, Reason: f.Reason}), t.recordLocked())
	t.mu.Unlock()
}
