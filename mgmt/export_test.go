package mgmt

import (
	"net/http"
	"time"
)

// SetLoginDelay replaces how s waits out a refused login's delay.
func SetLoginDelay(s *Server, fn func(r *http.Request, d time.Duration)) { s.loginDelay = fn }
