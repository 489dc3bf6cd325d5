package main

import (
	"sync"

	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

// alarmRelay passes the store's alarms (diskstore.Options.OnAlarm) to the
// broker, which is opened after the store: what is raised before the
// broker attaches is passed on when it does. Safe for concurrent use.
type alarmRelay struct {
	mu     sync.Mutex
	to     func(resource string, raised bool)
	raised map[string]bool // before attach
}

func (r *alarmRelay) set(resource string, raised bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.to != nil {
		r.to(resource, raised)
		return
	}
	if r.raised == nil {
		r.raised = make(map[string]bool)
	}
	r.raised[resource] = raised
}

func (r *alarmRelay) attach(to func(resource string, raised bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for resource, raised := range r.raised {
		if raised {
			to(resource, true)
		}
	}
	r.to, r.raised = to, nil
}

// diskFreeLimit reads the free-space limit in force, for /api/nodes: the
// disk store's own watch when the store is one (the monitor's is off
// then), else the monitor's.
func diskFreeLimit(mon *alarm.Monitor, st store.Store) func() uint64 {
	if ds, ok := st.(*diskstore.Store); ok {
		return ds.DiskFreeLimit
	}
	return func() uint64 { _, disk := mon.Limits(); return disk }
}
