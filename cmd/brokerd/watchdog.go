package main

import (
	"log/slog"
	"sync"
	"time"

	"github.com/brokerd/brokerd/internal/sdnotify"
)

// watchdog sends WATCHDOG=1 every period (half systemd's WatchdogSec)
// while a liveness check passes: check is a round trip through the
// broker and its store (Broker.Sync). A check that fails or is still
// running at the next tick sends nothing, so a broker stuck on a lock or
// a disk stops feeding systemd, which then kills and restarts it.
//
// One goroutine, plus one per check in flight (at most one); stop ends
// the ticking and waits for the goroutine, not for a stuck check.
type watchdog struct {
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func startWatchdog(period time.Duration, check func() error, log *slog.Logger) *watchdog {
	w := &watchdog{quit: make(chan struct{}), done: make(chan struct{})}
	go w.run(period, check, log)
	return w
}

func (w *watchdog) run(period time.Duration, check func() error, log *slog.Logger) {
	defer close(w.done)
	t := time.NewTicker(period)
	defer t.Stop()
	var result chan error // the check in flight, nil when none
	stuck := false
	for {
		if result == nil {
			result = make(chan error, 1)
			go func(c chan<- error) { c <- check() }(result)
		}
		select {
		case <-w.quit:
			return
		case err := <-result:
			result = nil
			if err != nil {
				log.Error("watchdog: the broker failed its liveness check; not notifying systemd", "err", err)
				stuck = true
			} else {
				if stuck {
					log.Info("watchdog: the broker passes its liveness check again")
					stuck = false
				}
				if err := sdnotify.Notify("WATCHDOG=1"); err != nil {
					log.Warn("sd_notify failed", "err", err)
				}
			}
			select {
			case <-w.quit:
				return
			case <-t.C:
			}
		case <-t.C:
			if !stuck {
				log.Error("watchdog: the broker's liveness check did not finish within the interval; not notifying systemd", "interval", period)
				stuck = true
			}
		}
	}
}

// stop ends the watchdog (at shutdown: systemd does not watch a stopping
// service). Idempotent.
func (w *watchdog) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}
