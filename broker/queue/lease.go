package queue

// Lease is a cluster leader's lease on deliveries (Config.Lease): the
// node may hand out messages only while a quorum of the group has
// recently confirmed that it leads. A leader cut off or paused (SIGSTOP)
// while the others elect another would otherwise, until it hears of the
// new term, deliver what the new leader delivers too: a delivery the
// durable delivered mark covers needs no commit, and the new leader flags
// it redelivered but the deposed one does not know to.
//
// Its methods are safe for concurrent use and cheap (Held reads an atomic
// and the monotonic clock).
type Lease interface {
	// Held reports whether deliveries may be made now.
	Held() bool
	// Regained returns a channel closed when the lease is next held
	// after a lapse, or when it ends for good; nil once it has ended (no
	// delivery will be made under it again). Take it before calling
	// Held: a renewal between the two is then never missed.
	Regained() <-chan struct{}
}

// leaseLapsedLocked reports whether q must not deliver now because the
// node's lease lapsed (Config.Lease), and returns the channel closed when
// it is held again (nil if it never will be). A broker with a lease
// dispatches every queue again when it is regained (the broker's
// watchLease), so a dispatch that stops here needs no wake of its own.
func (q *Queue) leaseLapsedLocked() (bool, <-chan struct{}) {
	l := q.Env.cfg.Lease
	if l == nil {
		return false, nil
	}
	regained := l.Regained()
	if l.Held() {
		return false, nil
	}
	return true, regained
}
