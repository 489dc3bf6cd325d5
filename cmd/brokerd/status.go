package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/brokerd/brokerd/internal/sdnotify"
)

// recoveryStatus reports recovery progress to systemd as STATUS= lines
// ("recovering: WAL 40 %", "recovering: 3/12 queues"), shown by
// systemctl status while brokerd starts. Each phase's first and last
// report is sent, others at most every statusEvery. Used from the
// goroutine that opens the store and the broker only.
type recoveryStatus struct {
	log  *slog.Logger
	last time.Time
}

const statusEvery = 250 * time.Millisecond

func (s *recoveryStatus) wal(done, total uint64) {
	s.send(done == 0 || done == total, fmt.Sprintf("recovering: WAL %d %%", done*100/max(total, 1)))
}

func (s *recoveryStatus) queues(done, total int) {
	s.send(done == 0 || done == total, fmt.Sprintf("recovering: %d/%d queues", done, total))
}

func (s *recoveryStatus) send(always bool, status string) {
	now := time.Now()
	if !always && now.Sub(s.last) < statusEvery {
		return
	}
	s.last = now
	if err := sdnotify.Notify("STATUS=" + status); err != nil {
		s.log.Warn("sd_notify failed", "err", err)
	}
}
