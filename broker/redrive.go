package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
)

// Redrive moves up to opts.Max ready messages of queue, from the head in
// delivery order, that match the filters: each to its origin queue (put
// directly into it, not routed), the one the broker recorded when it
// dead-lettered the message (RedriveOptions), or, with opts.Exchange set,
// routed through that exchange with opts.RoutingKey. x-death stays; the
// header x-redriven-count is incremented. It returns when done;
// StartRedrive runs the same moves as a task.
//
// Each move is one store batch, as dead-lettering is (planDeadLetterLocked):
// the target entries are put and the source entry deleted together, the
// message keeping its id, so it is in exactly one place at every instant,
// across a crash too. A target that refuses (missing, deleted, full with
// reject-publish, the source itself) leaves the message in place and
// counts a failure with the reason, as does a message without a
// dead-letter record when it is to go to its origin.
//
// Paged-out messages are read from the store in windows as the scan
// reaches them, outside the queue's lock, and moved straight out of the
// store's middle: those it leaves in place are not brought into memory.
//
// Concurrency: it takes the source queue's lock for chunks of up to
// redriveChunk moves, and the vhost lock shared (as dead-lettering does)
// until each move's batch is applied; copies reach their targets after
// the source lock is released. The error wraps ErrNotFound for an
// unknown vhost, queue or exchange.
func (b *Broker) Redrive(vhost, name string, opts queue.RedriveOptions) (queue.RedriveResult, error) {
	var res queue.RedriveResult
	q, toX, err := b.redriveSource(RedriveSpec{VHost: vhost, Queue: name, RedriveOptions: opts})
	if err != nil {
		return res, err
	}
	want := opts.Max
	if want <= 0 {
		want = int(^uint(0) >> 1)
	}
	run := &queue.Redrive{Queue: q, ToX: toX, Opts: opts, UpTo: q.Seq.Load()}
	for run.Res.Moved+run.Res.Failed < want {
		progressed, wait, gone, err := run.Chunk(want - run.Res.Moved - run.Res.Failed)
		if err != nil {
			return run.Res, fmt.Errorf("redrive queue '%s' in vhost '%s': %w", name, vhost, err)
		}
		if gone {
			return run.Res, notFoundf("no queue '%s' in vhost '%s'", name, vhost)
		}
		if wait != nil {
			<-wait.Done // the head is being read back from the store
			if wait.Err != nil {
				return run.Res, fmt.Errorf("redrive queue '%s' in vhost '%s': read paged messages: %w", name, vhost, wait.Err)
			}
			continue
		}
		if !progressed {
			break
		}
	}
	run.Res.Remaining, _ = q.ReadyLen()
	return run.Res, nil
}

// StartRedrive is Broker.StartRedrive as this Direct's user may do it, in
// its vhost: read permission on the source queue (as basic.get), write on
// the exchange when one is named (as basic.publish); a refused one is an
// access-refused error. The task checks them again as that user at each
// step, and write on each origin queue (a message whose origin is refused
// counts as a failure), also after a restart.
func (d *Direct) StartRedrive(queue string, opts queue.RedriveOptions, rate float64) (string, error) {
	if aerr := d.c.checkPerm(auth.Read, "queue", queue); aerr != nil {
		return "", aerr
	}
	if opts.ToExchange || opts.Exchange != "" {
		if aerr := d.c.checkPerm(auth.Write, "exchange", opts.Exchange); aerr != nil {
			return "", aerr
		}
	}
	user := d.c.userName
	if d.asBroker {
		user = ""
	}
	return d.c.b.StartRedrive(RedriveSpec{VHost: d.c.vhost.Name, Queue: queue, User: user, RedriveOptions: opts, Rate: rate})
}

// RedriveOptions says which ready messages Redrive moves and where
// (queue.RedriveOptions).
type RedriveOptions = queue.RedriveOptions

// RedriveFailure is one message a target refused; it stays in the source.
type RedriveFailure = queue.RedriveFailure

// RedriveResult counts what a Redrive did.
type RedriveResult = queue.RedriveResult

// NoOriginRecord is the failure of a redrive to origin of a message the
// broker has no dead-letter record for (queue.NoOriginRecord).
const NoOriginRecord = queue.NoOriginRecord

// RedrivenCountHeader counts how many times a message was redriven.
const RedrivenCountHeader = queue.RedrivenCountHeader
