package brokertest

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
)

// Backend makes the store a test broker runs on. The same behaviour tests
// run over every backend: BROKERD_TEST_STORE picks one (see Selected).
type Backend interface {
	// Name is how BROKERD_TEST_STORE names the backend.
	Name() string
	// Open returns a fresh, empty store. The harness closes it when the
	// test ends.
	Open(t testing.TB) store.Store
	// Reopen closes s and returns the store as it is after a restart:
	// durable state only. s was returned by Open or Reopen of this
	// backend; the harness closes the result when the test ends.
	Reopen(t testing.TB, s store.Store) store.Store
}

// EnvStore names the environment variable that selects the backend of
// tests that do not choose one; "memory" when unset.
const EnvStore = "BROKERD_TEST_STORE"

var registry = struct {
	sync.Mutex
	m map[string]Backend
}{m: map[string]Backend{"memory": Memory(), "memory-async": MemoryAsync()}}

// Register makes b selectable by name. A store package's test helper calls
// it from an init function; registering a name twice panics.
func Register(b Backend) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[b.Name()]; dup {
		panic("brokertest: backend " + b.Name() + " registered twice")
	}
	registry.m[b.Name()] = b
}

// Selected returns the backend BROKERD_TEST_STORE names ("memory" by
// default). An unknown name fails the test, listing the registered ones.
func Selected(t testing.TB) Backend {
	t.Helper()
	name := os.Getenv(EnvStore)
	if name == "" {
		name = "memory"
	}
	registry.Lock()
	b := registry.m[name]
	names := make([]string, 0, len(registry.m))
	for n := range registry.m {
		names = append(names, n)
	}
	registry.Unlock()
	if b == nil {
		slices.Sort(names)
		t.Fatalf("%s=%q: no such test store backend; registered: %s", EnvStore, name, strings.Join(names, ", "))
	}
	return b
}

// Memory returns the in-memory backend (memstore). Reopen hands the same
// data to a new store, as a restart of a disk store would.
func Memory() Backend { return memoryBackend{} }

type memoryBackend struct{}

func (memoryBackend) Name() string { return "memory" }

func (memoryBackend) Open(testing.TB) store.Store { return memstore.New() }

func (memoryBackend) Reopen(t testing.TB, s store.Store) store.Store {
	t.Helper()
	ms, ok := s.(*memstore.Store)
	if !ok {
		t.Fatalf("memory backend: reopen of a %T", s)
	}
	return ms.Reopen()
}

// MemoryAsync returns the in-memory backend with the completion timing of
// a disk store: a batch is applied when Apply is called (reads see it at
// once), but done runs later, in Apply order, on the store's own
// goroutine, as after a group commit's fsync. Tests that pass on Memory
// but not here depend on done running inline.
func MemoryAsync() Backend { return asyncBackend{} }

type asyncBackend struct{}

func (asyncBackend) Name() string { return "memory-async" }

func (asyncBackend) Open(testing.TB) store.Store { return newAsyncStore(memstore.New()) }

func (asyncBackend) Reopen(t testing.TB, s store.Store) store.Store {
	t.Helper()
	as, ok := s.(*asyncStore)
	if !ok {
		t.Fatalf("memory-async backend: reopen of a %T", s)
	}
	as.Close()
	return newAsyncStore(as.Store.(*memstore.Store).Reopen())
}

// asyncStore defers the completions of a store onto one goroutine.
type asyncStore struct {
	store.Store

	mu      sync.Mutex
	cond    *sync.Cond
	pending []func()
	closed  bool
	exited  chan struct{}
}

func newAsyncStore(s store.Store) *asyncStore {
	a := &asyncStore{Store: s, exited: make(chan struct{})}
	a.cond = sync.NewCond(&a.mu)
	go a.run()
	return a
}

func (a *asyncStore) run() {
	defer close(a.exited)
	a.mu.Lock()
	for {
		for len(a.pending) == 0 && !a.closed {
			a.cond.Wait()
		}
		if len(a.pending) == 0 {
			a.mu.Unlock()
			return
		}
		fns := a.pending
		a.pending = nil
		a.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
		a.mu.Lock()
	}
}

// Apply implements store.Store.
func (a *asyncStore) Apply(b *store.Batch, done func(error)) {
	a.Store.Apply(b, func(err error) {
		if done == nil {
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			done(err)
			return
		}
		a.pending = append(a.pending, func() { done(err) })
		a.cond.Signal()
		a.mu.Unlock()
	})
}

// Close runs the completions still pending, then closes the store.
func (a *asyncStore) Close() error {
	a.mu.Lock()
	a.closed = true
	a.cond.Signal()
	a.mu.Unlock()
	<-a.exited
	return a.Store.Close()
}
