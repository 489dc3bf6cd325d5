package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/memstore"
)

// A stored user whose password hashing algorithm this broker does not
// know is a corrupt record: Open refuses it rather than start without
// the user (broker/defs leaves the algorithm's name to the broker).
func TestRecoveryRefusesUnknownHashAlgorithm(t *testing.T) {
	st := memstore.New()
	errc := make(chan error, 1)
	st.Apply(&store.Batch{Meta: []store.MetaOp{defs.EncodeUser(defs.User{Name: "u", Algorithm: "rabbit_password_hashing_rot13"})}},
		func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	b, err := Open(Options{Store: st})
	if err == nil {
		b.Close()
		t.Fatal("Open accepted a user with an unknown hashing algorithm")
	}
	if !errors.Is(err, defs.ErrCorrupt) || !strings.Contains(err.Error(), `unknown password hashing algorithm "rabbit_password_hashing_rot13"`) {
		t.Fatalf("Open: %v", err)
	}
}
