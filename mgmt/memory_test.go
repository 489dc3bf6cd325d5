package mgmt_test

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerd/brokerd/internal/alarm"
)

// The case: three 60 MiB JSON bodies at once — a queue
// declaration whose argument is an array of zeros — from management users
// without permissions (none in the vhost; "" patterns, which allow
// nothing), and the same from an administrator, who may declare but not
// with a body over MaxBody (chunked, so it is refused only as it is
// read). The process's resident memory (broker, API and these clients)
// stays within 100 MiB of what it was idle; it grew by gigabytes when the
// body was decoded before the permission check. Run without -race (.ci/run
// does): the race detector's shadow memory stays resident.
func TestHeldMemoryHugeBodies(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory stays resident after the heap is freed; run without -race")
	}
	const size = 60 << 20
	a := startAPI(t)
	a.must(201, "PUT", "/users/stranger", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/users/nobody", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/nobody", map[string]any{"configure": "", "write": "", "read": ""})

	runtime.GC()
	debug.FreeOSMemory()
	idle, err := alarm.ProcessRSS()
	if err != nil {
		t.Fatal(err)
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if rss, err := alarm.ProcessRSS(); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	for _, c := range []struct {
		user    string
		chunked bool
		status  int
	}{{"stranger", false, 401}, {"nobody", false, 401}, {"nobody", true, 401}, {"guest", true, 400}} {
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, status, err := sendBody(a, c.user, "PUT", "/api/queues/%2F/big", argsOfZeros(size), size, c.chunked)
				if err != nil || status != c.status {
					t.Errorf("%s (chunked %v): %d, %v; want %d", c.user, c.chunked, status, err, c.status)
				}
			}()
		}
		wg.Wait()
	}
	close(stop)
	<-sampled
	growth := int64(peak.Load()) - int64(idle)
	t.Logf("RSS idle %d MiB, peak %d MiB: +%d MiB over 4 rounds of 3 concurrent 60 MiB bodies", idle>>20, peak.Load()>>20, growth>>20)
	if growth > 100<<20 {
		t.Fatalf("RSS grew by %d MiB, over 100 MiB", growth>>20)
	}
	a.must(404, "GET", "/queues/%2F/big", nil)
}
