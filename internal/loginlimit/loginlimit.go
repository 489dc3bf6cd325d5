// Package loginlimit bounds how fast one source may guess passwords: a
// budget of failed logins per remote address, shared by every path that
// checks a password (AMQP's connection.start-ok and the management API's
// basic auth), so that opening more connections, or switching protocol,
// buys no more guesses.
//
// Each source has a token bucket: Burst failed logins in a row, then one
// more every Interval. A failed login costs a token and a successful one
// nothing, so a source that logs in successfully never runs short; a
// source's attempts are checked one at a time (Check), so parallel
// attempts cannot overdraw the bucket. An attempt that finds the bucket empty is refused
// without checking the password: the caller answers it exactly as a wrong
// password (same reply, same delay), so a client cannot tell a refused
// guess from a wrong one, nor learn anything from the guesses it makes
// past its budget. Nobody is locked out for good: the bucket refills at
// one token per Interval, so a legitimate client behind a busy source
// (a NAT, a proxy) gets through once the guessing stops, or between
// guesses at the refill rate.
//
// Sources are IPv4 addresses and IPv6 /64 prefixes (one host commonly has
// a whole /64 to choose from); a Unix socket or an unknown address is one
// source. The table of sources is bounded (MaxSources): buckets that have
// refilled completely are forgotten (a full bucket is what a new source
// gets anyway), and when the table is full of sources still short of
// tokens, new sources share one overflow bucket.
package loginlimit

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Options configures a Limiter. Zero fields take the defaults noted.
type Options struct {
	// Burst is how many failed logins a source may make in a row (default
	// 10); negative: no limit (every attempt is checked).
	Burst int
	// Interval is how long a source waits for each further failed login
	// once its burst is spent (default 1s).
	Interval time.Duration
	// MaxSources bounds the sources remembered (default 65536, about 6 MB
	// at most).
	MaxSources int
	// Now is the clock; time.Now if nil. Tests pass one they move.
	Now func() time.Time
}

// Limiter is a per-source budget of failed logins. Safe for concurrent
// use. The zero value is not usable: call New.
type Limiter struct {
	burst    float64
	interval time.Duration
	max      int
	now      func() time.Time
	off      bool

	mu        sync.Mutex
	buckets   map[netip.Prefix]*bucket
	overflow  bucket    // shared by new sources while the table is full
	lastSweep time.Time // when a full table was last swept
}

// bucket holds a source's tokens as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a Limiter.
func New(o Options) *Limiter {
	if o.Burst == 0 {
		o.Burst = 10
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.MaxSources <= 0 {
		o.MaxSources = 65536
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Limiter{burst: float64(o.Burst), interval: o.Interval, max: o.MaxSources, now: o.Now,
		off: o.Burst < 0, buckets: map[netip.Prefix]*bucket{}}
	l.overflow.tokens = l.burst
	return l
}

// Check checks a login attempt from remote with check, which compares the
// password and reports whether it was right, unless the source is over
// its budget. It returns whether the login succeeded and whether check
// was run at all: checked false means the source is over its budget, and
// the caller refuses the attempt as a wrong password.
//
// check runs under the limiter's lock, so the attempts of a source are
// checked one at a time and each failure is charged before the next is
// checked: parallel guesses cannot overdraw the budget, and parallel
// logins that succeed (a connection pool opening) are never refused. A
// password check takes microseconds; check must not do more (no I/O, no
// waiting).
func (l *Limiter) Check(remote net.Addr, check func() bool) (ok, checked bool) {
	if l == nil || l.off {
		return check(), true
	}
	now := l.now()
	src := Source(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(src, now)
	l.refill(b, now)
	if b.tokens < 1 {
		return false, false
	}
	if check() {
		if b != &l.overflow && b.tokens >= l.burst {
			delete(l.buckets, src) // as good as new: forget it
		}
		return true, true
	}
	b.tokens--
	return false, true
}

// Sources returns how many sources the limiter remembers (tests and
// metrics).
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// bucketLocked returns src's bucket, making one (full) for a new source;
// the overflow bucket when the table is full of sources still short of
// tokens.
func (l *Limiter) bucketLocked(src netip.Prefix, now time.Time) *bucket {
	if b := l.buckets[src]; b != nil {
		return b
	}
	if len(l.buckets) >= l.max {
		// A sweep is O(table): at most one per Interval, so a flood of
		// new sources costs no more than that.
		if now.Sub(l.lastSweep) >= l.interval {
			l.lastSweep = now
			for k, b := range l.buckets {
				if l.refill(b, now); b.tokens >= l.burst {
					delete(l.buckets, k)
				}
			}
		}
		if len(l.buckets) >= l.max {
			return &l.overflow
		}
	}
	b := &bucket{tokens: l.burst, last: now}
	l.buckets[src] = b
	return b
}

// refill adds the tokens earned since b.last.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)/float64(l.interval))
	}
	b.last = now
}

// Source is the key remote is counted under: its IPv4 address, or its
// IPv6 /64 prefix; the zero Prefix for an address that is not IP (a Unix
// socket, nil).
func Source(remote net.Addr) netip.Prefix {
	var ip netip.Addr
	switch a := remote.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}
