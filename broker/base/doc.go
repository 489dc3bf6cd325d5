// Package base is the vocabulary that package broker and its pure
// subpackages (policy, auth) share: the two refusals a management
// operation reports (ErrNotFound, InvalidError). broker re-exports them
// (broker.ErrNotFound, broker.InvalidError), as Pebble's root package
// re-exports its internal/base errors, so callers outside broker never
// import this package; it exists so that the subpackages can return
// broker's errors without importing broker.
//
// It imports nothing from brokerd, holds no state and takes no locks.
package base
