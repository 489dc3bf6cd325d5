package queue

import (
	"errors"
	"fmt"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/store"
)

// Damaged data on disk. A message whose stored body the store cannot read
// (a segment block that fails its checksum: store.DamageError) is lost;
// nothing else is. A read of a queue's middle that meets one takes its
// entry out of the queue as a counted loss (takeDamagedLocked, from the
// merge) and goes on: the other entries of the read are merged, and the
// store does not fail. The entry is then deleted from the store, or, if
// the queue has a dead letter exchange and the entry's properties are
// readable, dead-lettered with reason damaged and an empty body
// (dropDamagedLocked). A message's properties are stored with its body, so
// only an entry with a header of its own (a dead-lettered copy, whose
// rewritten properties the index keeps) can be dead-lettered.
//
// Each loss is counted (QueueInfo.Damaged, Stats.Damaged); the first one
// of each damaged place in a queue is logged as an error with the file,
// offset and reason (a block's messages are read a window at a time).

// pageErr is the error of page-in read r with damage left out: r.Damage
// names the messages lost, which the merge takes out of the queue
// (takeDamagedLocked); the rest merge as usual.
func pageErr(r engine.PageRead, err error) error {
	if r.Damage != nil && errors.Is(err, store.ErrDamaged) {
		return nil
	}
	return err
}

// damagedEntry is an entry taken out as lost, and where its message was.
type damagedEntry struct {
	e     *Entry
	where *store.Damage
}

// takeDamagedLocked takes m, an entry of l's middle that a read found
// with its message damaged (where), out of the queue: it leaves the ready
// count now, and dropDamagedLocked deletes or dead-letters it.
func (q *Queue) takeDamagedLocked(l *level, m *store.EntryMeta, where *store.Damage) {
	q.unpageTimerLocked(m.Seq)
	q.ready.TakeOut(l, m.Seq, int64(m.Size), true)
	e := q.entryFromMeta(m, &store.Message{ID: m.Msg})
	e.state = stGone
	q.damaged = append(q.damaged, damagedEntry{e, where})
	q.syncCounts()
}

// dropDamagedLocked writes, in t, what takeDamagedLocked took out: each
// entry deleted, or dead-lettered when deadLetter is set (t will be
// finished) and the queue and entry allow it. It counts and logs them.
func (q *Queue) dropDamagedLocked(t *Txn, deadLetter bool) {
	if len(q.damaged) == 0 {
		return
	}
	b := q.Env
	lost := q.damaged
	q.damaged = nil
	cfg := q.Settings()
	var dl []*Entry
	type place struct {
		file   string
		offset int64
	}
	n := map[place]int{}
	var order []*store.Damage
	for _, d := range lost {
		p := place{}
		if d.where != nil {
			p = place{d.where.File, d.where.Offset}
		}
		if n[p] == 0 {
			order = append(order, d.where)
		}
		n[p]++
		e := d.e
		if deadLetter && cfg.hasDLX && e.Header != nil && e.DeadLetter == "" {
			props, err := amqp.DecodeProperties(e.Header.Props)
			// A message of its own, with no body: the lost one's id
			// may not be referred to again.
			e.Msg = &store.Message{ID: b.Store.AllocMsgID(), Header: *e.Header, Persistent: err == nil && props.DeliveryMode == 2}
			dl = append(dl, e)
			continue
		}
		t.del(e)
		b.Counters.Discarded(deadletter.Damaged, 1)
	}
	if len(dl) > 0 {
		q.deadLetterLocked(t, dl, deadletter.Damaged, false)
	}
	q.Stats.Damaged.Add(uint64(len(lost)))
	b.Counters.Damaged.Add(uint64(len(lost)))
	for _, w := range order {
		var p place
		if w != nil {
			p = place{w.File, w.Offset}
		}
		key := fmt.Sprintf("%s@%d", p.file, p.offset)
		if q.damageLogged[key] {
			continue
		}
		if q.damageLogged == nil {
			q.damageLogged = make(map[string]bool)
		}
		q.damageLogged[key] = true
		args := []any{"vhost", q.Host.Name, "queue", q.Name, "messages", n[p]}
		if w != nil {
			args = append(args, "file", w.File, "offset", w.Offset, "reason", w.Reason)
		}
		b.Log.Error("messages lost to damaged data; taken out of their queue (more from the same place are counted, not logged)", args...)
	}
}
