// Package fdbudget divides the process's file descriptors (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at start)
// between the message store, which must never run out, and the sockets
// that clients open, whose number a stranger controls.
//
// Out of descriptors, a store cannot create the files a checkpoint writes,
// and Pebble, the index, treats a failure to create its log file as
// fatal. So the store gets a reserve, the HTTP listener and the AMQP
// listeners bounds that fit in what is left:
//
//	store  max(128, min(8192, limit/4))   index tables, segment handles, WAL, directories
//	HTTP   max(8, min(1024, limit/16))    management API connections
//	other  32                             listeners, logs, /proc reads, the runtime's own
//	AMQP   the rest                       client connections, handshakes included
//
// At the systemd unit's 65,536: store 8,192, HTTP 1,024, AMQP 56,288. At
// 1,024: 256, 64 and 672. Below 256 or so the store's share is most of
// it; a broker needs a higher limit than that to serve many clients.
package fdbudget

import (
	"fmt"
	"os"
	"syscall"
)

// Budget is a division of Limit descriptors.
type Budget struct {
	Limit int // the soft RLIMIT_NOFILE
	Store int // the store's reserve (diskstore.Options.MaxOpenFiles)
	HTTP  int // the management listener's connections
	AMQP  int // the AMQP listeners' connections, over all of them
}

// Fixed shares; see the package doc.
const (
	storeMin, storeMax = 128, 8192
	httpMin, httpMax   = 8, 1024
	other              = 32
	amqpMin            = 8
)

// Split divides limit descriptors.
func Split(limit int) Budget {
	b := Budget{Limit: limit}
	b.Store = max(storeMin, min(storeMax, limit/4))
	b.HTTP = max(httpMin, min(httpMax, limit/16))
	b.AMQP = max(amqpMin, limit-b.Store-b.HTTP-other)
	return b
}

// Limit returns the soft RLIMIT_NOFILE.
func Limit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur > 1<<30 {
		return 1 << 30, nil
	}
	return int(lim.Cur), nil
}

// Free returns how many more descriptors the process may open: the soft
// limit less those open now (Open). It costs a directory read of every
// open descriptor, so callers use it before rare work that must not run
// out (a checkpoint), not per operation.
func Free() (int, error) {
	limit, err := Limit()
	if err != nil {
		return 0, err
	}
	open, err := Open()
	if err != nil {
		return 0, err
	}
	return limit - open, nil
}

// Open returns the number of descriptors the process has open, counted
// in /proc/self/fd (a directory read of every one: not per operation).
func Open() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("count open file descriptors: %w", err)
	}
	defer d.Close()
	open := 0
	for {
		names, err := d.Readdirnames(1024)
		open += len(names)
		if err != nil {
			break
		}
	}
	// The directory's own descriptor is listed and closed again.
	return open - 1, nil
}
