package broker

import (
	"slices"
	"sort"
	"strings"
	"sync/atomic"
)

// Resource alarms (SPEC §7), as RabbitMQ's: while a memory or disk alarm is
// raised, a connection that publishes is blocked — it gets
// connection.blocked (if it announced the capability) and its frames are not
// read until every alarm has cleared, so publishers are held back by TCP
// while consumers keep draining. A connection is stopped at its next
// basic.publish content frame (header or body: HoldContent) and at each
// complete publish, so a body under way stops growing at once. Nothing is
// lost: the publish that found the alarm is carried out when it clears.

// Alarm resources: RabbitMQ's two, and the store's (diskstore's alarms,
// raised while it retries what it cannot do for now, and "store" once it
// failed for good).
const (
	AlarmMemory     = "memory"
	AlarmDisk       = "disk"
	AlarmCheckpoint = "checkpoint"
	AlarmWAL        = "wal"
	AlarmStore      = "store"
)

// blockedReason is the connection.blocked reason of an alarm: RabbitMQ's
// "low on …" for its resources, a phrase saying what is wrong for the
// store's.
func blockedReason(resource string) string {
	switch resource {
	case AlarmCheckpoint:
		return "store cannot checkpoint"
	case AlarmWAL:
		return "store cannot write its log"
	case AlarmStore:
		return "store failed"
	}
	return "low on " + resource
}

// neverClear is never closed: the wait of an alarm that cannot clear.
var neverClear = make(chan struct{})

// alarmState is guarded by Broker.mu.
type alarmState struct {
	active map[string]bool
	// clear is closed when the last alarm clears; nil when none is raised.
	clear chan struct{}
	// on mirrors clear != nil for publishers, which read it without the
	// lock: a publish takes no broker-wide lock while no alarm is raised.
	on atomic.Bool
}

// SetAlarm raises or clears a resource alarm.
func (b *Broker) SetAlarm(resource string, raised bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := &b.alarms
	if a.active == nil {
		a.active = make(map[string]bool)
	}
	if a.active[resource] == raised {
		return
	}
	if raised {
		a.active[resource] = true
		if a.clear == nil {
			a.clear = make(chan struct{})
			a.on.Store(true)
		}
		b.env.Log.Warn("resource alarm raised: publishers are blocked", "resource", resource)
		return
	}
	delete(a.active, resource)
	b.env.Log.Info("resource alarm cleared", "resource", resource)
	if len(a.active) == 0 && a.clear != nil {
		close(a.clear)
		a.clear = nil
		a.on.Store(false)
	}
}

// Alarms returns the raised alarms, sorted.
func (b *Broker) Alarms() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []string
	for r := range b.alarms.active {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// alarmWait returns a channel closed when the raised alarms clear and the
// blocked reason RabbitMQ gives ("low on memory", "low on disk"), or nil
// when no alarm is raised.
func (b *Broker) alarmWait() (<-chan struct{}, string) {
	if !b.alarms.on.Load() && b.env.StoreErr.Load() == nil {
		return nil, "" // the common case, without the broker's lock
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.alarms.clear == nil {
		if b.env.StoreErr.Load() != nil {
			// The store failed and its alarm is on its way (raised off
			// the failing goroutine, see storeFailed); it never clears.
			return neverClear, blockedReason(AlarmStore)
		}
		return nil, ""
	}
	var parts []string
	for r := range b.alarms.active {
		parts = append(parts, blockedReason(r))
	}
	slices.Sort(parts)
	return b.alarms.clear, strings.Join(parts, " & ")
}

// HoldContent implements amqp.ContentHolder: a connection that sends a
// content frame while an alarm is raised is held there, as at a publish,
// so a body in assembly stops growing at once instead of at its end.
func (c *conn) HoldContent() { c.holdForAlarms() }

// holdForAlarms blocks a publishing connection while an alarm is raised.
// It returns when the alarms clear, or the connection or the broker closes.
func (c *conn) holdForAlarms() {
	clear, reason := c.b.alarmWait()
	if clear == nil || c.ac == nil {
		return // a Direct is refused in Direct.Publish instead
	}
	c.ac.Blocked(reason)
	select {
	case <-clear:
		c.ac.Unblocked()
	case <-c.ac.Done():
	case <-c.b.quit:
	}
}
