package brokertest

import (
	"log/slog"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

func init() { Register(Disk()) }

// Disk returns the durable backend (diskstore) in a temporary directory.
// Its checkpoints are small (256 KiB) so that behaviour tests also read
// entries back from segments and the index, not only from the overlay,
// and checkpoints run concurrently with the broker's writes.
func Disk() Backend { return diskBackend{} }

type diskBackend struct{}

func (diskBackend) Name() string { return "disk" }

func (diskBackend) options() diskstore.Options {
	return diskstore.Options{CheckpointBytes: 256 << 10, Logger: slog.New(slog.DiscardHandler)}
}

func (b diskBackend) Open(t testing.TB) store.Store {
	t.Helper()
	s, err := diskstore.Open(t.TempDir(), b.options())
	if err != nil {
		t.Fatalf("open disk store: %v", err)
	}
	return s
}

func (b diskBackend) Reopen(t testing.TB, s store.Store) store.Store {
	t.Helper()
	ds, ok := s.(*diskstore.Store)
	if !ok {
		t.Fatalf("disk backend: reopen of a %T", s)
	}
	// Close is idempotent: a store the harness already closed reopens too.
	ds.Close()
	n, err := diskstore.Open(ds.Dir(), b.options())
	if err != nil {
		t.Fatalf("reopen disk store: %v", err)
	}
	return n
}
