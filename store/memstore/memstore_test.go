package memstore_test

import (
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t,
		func(*testing.T) store.Store { return memstore.New() },
		func(_ *testing.T, s store.Store) store.Store { return s.(*memstore.Store).Reopen() })
}
