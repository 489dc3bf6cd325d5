package mgmt

import (
	"net/http"
	"time"
)

// SetLoginDelay replaces how s waits out a refused login's delay.
func SetLoginDelay(s *Server, fn func(r *http.Request, d time.Duration)) { s.loginDelay = fn }

// SampleRates takes the rates' samples at now, as the sampler's goroutine
// does every Options.SampleInterval.
func SampleRates(s *Server, now time.Time) { s.rates.sample(now) }
