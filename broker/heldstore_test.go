// heldStore, a store wrapper that holds completions back as a group commit does.

package broker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// heldStore stands for a disk store with group commit. While holding, it
// applies each batch to the store it wraps but keeps the completion back,
// as a WAL keeps it until the fsync; release then runs every completion
// held so far, in Apply order, as one group, followed by the functions
// the broker asked for with AfterGroup (it implements the broker's
// groupCompleter, as the disk store does). While not holding, completions
// pass straight through, each followed by the AfterGroup functions it
// registered.
type heldStore struct {
	store.Store
	mu      sync.Mutex
	holding bool
	failErr error         // while holding, release completes with this error
	batches []store.Batch // the batches applied while holding
	held    []func(error) // their completions, once the inner store gave them
	after   []func()
	changed chan struct{} // signalled when held grows
}

func newHeldStore() *heldStore { return &heldStore{changed: make(chan struct{}, 1)} }

// wrap is a brokertest.Config.WrapStore.
func (h *heldStore) wrap(s store.Store) store.Store {
	h.Store = s
	return h
}

// start begins holding completions. The test's cleanup stops and releases
// them (so a broker waiting for one can shut down).
func (h *heldStore) start(t testing.TB) {
	h.mu.Lock()
	h.holding = true
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		h.holding = false
		h.mu.Unlock()
		h.release()
	})
}

func (h *heldStore) Apply(b *store.Batch, done func(error)) {
	h.mu.Lock()
	if !h.holding {
		h.mu.Unlock()
		h.Store.Apply(b, func(err error) {
			if done != nil {
				done(err)
			}
			h.runAfter()
		})
		return
	}
	h.batches = append(h.batches, b.Clone())
	h.mu.Unlock()
	h.Store.Apply(b, func(err error) {
		h.mu.Lock()
		h.held = append(h.held, func(e error) {
			if err != nil {
				e = err
			}
			if done != nil {
				done(e)
			}
		})
		h.mu.Unlock()
		select {
		case h.changed <- struct{}{}:
		default:
		}
	})
}

// AfterGroup implements the broker's groupCompleter.
func (h *heldStore) AfterGroup(fn func()) {
	h.mu.Lock()
	h.after = append(h.after, fn)
	h.mu.Unlock()
}

func (h *heldStore) runAfter() {
	h.mu.Lock()
	fs := h.after
	h.after = nil
	h.mu.Unlock()
	for _, fn := range fs {
		fn()
	}
}

// stop stops holding and releases what is held: completions pass straight
// through from now on.
func (h *heldStore) stop() {
	h.mu.Lock()
	h.holding = false
	h.mu.Unlock()
	h.release()
}

// waitHeld waits until n completions are held.
func (h *heldStore) waitHeld(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(brokertest.Wait)
	for {
		h.mu.Lock()
		got := len(h.held)
		h.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("%d store completions held, want %d", got, n)
		}
	}
}

// applied returns the batches applied while holding.
func (h *heldStore) applied() []store.Batch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]store.Batch(nil), h.batches...)
}

// release completes every held batch as one group commit: their done
// callbacks in Apply order (with failErr, if set), then the AfterGroup
// functions.
func (h *heldStore) release() {
	h.mu.Lock()
	held, err := h.held, h.failErr
	h.held = nil
	h.mu.Unlock()
	for _, done := range held {
		done(err)
	}
	h.runAfter()
}

// ungrouped hides heldStore's AfterGroup: a store whose completions the
// broker cannot tell apart from one-off ones.
type ungrouped struct{ store.Store }
