package shovel

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Options configure a Manager.
type Options struct {
	// Local opens an AMQP 0-9-1 connection to this brokerd's vhost for an
	// "amqp://" URI with no host, with every permission in that vhost
	// (RabbitMQ's direct connection). The returned io.ReadWriteCloser
	// speaks AMQP (amqp091.Open is run on it by the engine). Nil: such a
	// URI fails to connect.
	Local func(ctx context.Context, vhost string) (io.ReadWriteCloser, error)
	// Deleted is called (from the shovel's goroutine, no lock of the
	// Manager held) when a shovel reached src-delete-after and stopped:
	// the caller clears the parameter, which calls Manager.Stop. It must
	// not call Close.
	Deleted func(vhost, name string)
	Logger  *slog.Logger // slog.Default()
	// Node is the node name reported in Status.Node and as shovelled-by
	// in the x-shovelled header.
	Node string
}

// Manager runs dynamic shovels, one goroutine each (plus the client
// library's). Safe for concurrent use.
type Manager struct {
	o Options

	// opMu serialises Start, Stop, Restart and Close, so that a shovel
	// replaced is stopped before its successor connects. mu guards
	// workers and closed; it is a leaf.
	opMu    sync.Mutex
	mu      sync.Mutex
	workers map[key]*worker // mu
	closed  bool            // mu
	wg      sync.WaitGroup  // every worker goroutine
}

type key struct{ vhost, name string }

// NewManager returns a Manager with no shovels.
func NewManager(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Manager{o: o, workers: map[key]*worker{}}
}

// Start starts the shovel vhost/name, replacing (stopping first) one of
// that name. After Close it does nothing.
func (m *Manager) Start(vhost, name string, d Definition) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.startLocked(vhost, name, d)
}

// startLocked is Start with opMu held.
func (m *Manager) startLocked(vhost, name string, d Definition) {
	k := key{vhost, name}
	m.mu.Lock()
	old := m.workers[k]
	delete(m.workers, k)
	closed := m.closed
	m.mu.Unlock()
	if old != nil {
		old.stop()
	}
	if closed {
		return
	}
	w := newWorker(m, vhost, name, d)
	m.mu.Lock()
	m.workers[k] = w
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		w.run()
	}()
}

// Stop stops the shovel and forgets it; unknown names are ignored. It
// returns once the shovel's connections are closed (messages in flight
// unacknowledged on the source go back).
func (m *Manager) Stop(vhost, name string) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	w := m.workers[key{vhost, name}]
	delete(m.workers, key{vhost, name})
	m.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// Restart reconnects the shovel, as RabbitMQ's restart does: the worker is
// stopped and a new one started with the same definition (a terminated
// shovel starts again; src-delete-after counts afresh). False if there is
// no such shovel.
func (m *Manager) Restart(vhost, name string) bool {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	w := m.workers[key{vhost, name}]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	m.startLocked(vhost, name, w.def)
	return true
}

// Status lists every shovel, sorted by vhost then name.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	out := make([]Status, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status())
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Vhost, b.Vhost); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Close stops every shovel (at broker shutdown) and waits for their
// goroutines; no Deleted calls. Later Starts do nothing. Idempotent.
func (m *Manager) Close() {
	m.opMu.Lock()
	m.mu.Lock()
	m.closed = true
	ws := m.workers
	m.workers = map[key]*worker{}
	m.mu.Unlock()
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		w.stop()
	}
	m.opMu.Unlock()
	m.wg.Wait()
}
