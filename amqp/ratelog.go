package amqp

import (
	"log/slog"
	"time"

	"github.com/brokerd/brokerd/internal/ratelog"
)

// logInterval is the period over which the server's logLimiters
// aggregate.
const logInterval = ratelog.Interval

// logLimiter logs an event a peer can cause at will (see ratelog.Limiter).
type logLimiter = ratelog.Limiter

func newLogLimiter(log *slog.Logger, level slog.Level, msg string, interval time.Duration) *logLimiter {
	return ratelog.New(log, level, msg, interval)
}
