package broker

import (
	"errors"
	"fmt"
)

// syncer is a store whose writes complete asynchronously and that can
// wait for them (diskstore). A store without it (memstore) completes
// every write inside Apply.
type syncer interface {
	Sync() error
}

// ErrClosed is returned by Sync after Close.
var ErrClosed = errors.New("broker: closed")

// Sync returns once every store write started before the call is durable
// and its completions have run: the publisher confirms of the publishes
// received so far are queued to their connections (those of publishes the
// store refused as nacks). It takes the broker's lock on the way, so it
// also proves the broker is not stuck on it.
//
// brokerd calls it at shutdown, after it stopped accepting connections and
// before it closes them with 320, so that confirms in flight reach their
// publishers, and from the systemd watchdog as a liveness check. Safe for
// concurrent use.
func (b *Broker) Sync() error {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if p := b.env.StoreErr.Load(); p != nil {
		return fmt.Errorf("store failed: %w", *p)
	}
	if s, ok := b.env.Store.(syncer); ok {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("sync store: %w", err)
		}
	}
	return nil
}
