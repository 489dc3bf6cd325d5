package engine

import (
	"errors"

	"github.com/brokerd/brokerd/store"
)

// BacklogBit marks a store queue id as a queue's dead-letter backlog
// range; queue ids are counters far below it.
const BacklogBit = 1 << 62

// Ranges names where one queue's entries lie in the store: its durable
// range (a durable queue's stored entries, under its id), its volatile
// range (entries that do not survive a restart, written once they page:
// store.VolatileQueue|id), and the two backlog ranges of dead letters
// waiting for a route (BacklogBit|id, and a volatile one for transient
// dead letters). The two ranges of a kind share one seq and are read
// merged.
type Ranges struct {
	Store   store.Store
	ID      store.QueueID
	Durable bool // the queue survives a restart: its durable range is used
}

// VolatileID is the store queue of the volatile range.
func (s Ranges) VolatileID() store.QueueID { return store.VolatileQueue | s.ID }

// BacklogID is the store queue of the durable backlog range.
func (s Ranges) BacklogID() store.QueueID { return BacklogBit | s.ID }

// VolatileBacklogID is the store queue of the volatile backlog range.
func (s Ranges) VolatileBacklogID() store.QueueID { return store.VolatileQueue | BacklogBit | s.ID }

// ReadLevel reads up to want entries of level prio with seq >= from, in
// seq order, merged from the ranges the queue's middles may lie in: the
// durable range (a durable queue) and, if spilled (anything was ever
// written to it, as the caller saw it when the read began), the volatile
// range. Fewer than want means the level has no more.
func (s Ranges) ReadLevel(spilled bool, prio uint8, from uint64, want int, buf []store.EntryMeta) ([]store.EntryMeta, error) {
	if !spilled {
		if !s.Durable {
			return buf, nil
		}
		return s.Store.ReadEntries(s.ID, prio, from, want, buf)
	}
	if !s.Durable {
		return s.Store.ReadEntries(s.VolatileID(), prio, from, want, buf)
	}
	a, err := s.Store.ReadEntries(s.ID, prio, from, want, buf)
	if err != nil {
		return nil, err
	}
	v, err := s.Store.ReadEntries(s.VolatileID(), prio, from, want, nil)
	if err != nil {
		return nil, err
	}
	return MergeBySeq(a, v, want), nil
}

// PageRead is one read of a level's middle: entries with their messages.
type PageRead struct {
	Metas []store.EntryMeta
	Msgs  []*store.Message
	// Damage, when not nil, names the messages the store could not read
	// because the data holding them is damaged: their Msgs are nil, and
	// the read's error is Damage too, so a caller that does not look for
	// it stops there. A paging owner takes those entries out of the
	// queue as lost and merges the rest.
	Damage *store.DamageError
	// Done: the read covered the middle as it was bounded then (to).
	Done bool
}

// ReadMiddle reads up to want entries of level prio from seq from, up to
// seq to, with their messages (ReadLevel, then one Store.LoadMessages),
// and if wantBytes > 0 only as many as hold wantBytes of bodies (at least
// one): the entries' sizes are in the index, so the bodies left out are
// never read. It touches no queue state: callers hold the queue's lock or
// not.
func (s Ranges) ReadMiddle(spilled bool, prio uint8, from, to uint64, want int, wantBytes int64, buf []store.EntryMeta) (PageRead, error) {
	var r PageRead
	for attempt := 1; ; attempt++ {
		var err error
		r, err = s.readMiddleOnce(spilled, prio, from, to, want, wantBytes, buf)
		if !retryLoad(err, attempt) {
			return r, err
		}
		buf = r.Metas[:0]
	}
}

// maxLoadAttempts bounds the reads of entries whose messages vanished
// before they were loaded (retryLoad).
const maxLoadAttempts = 4

// retryLoad reports whether a read whose message load failed with err
// (attempt n) is to be made again. Reading entries and loading their
// messages are two store calls: an entry deleted between them (acked,
// expired, purged by someone holding the queue's lock while the read runs
// without it) may have taken its message with it, and the store then
// answers ErrUnknownMessage. A second read no longer lists the entry. Only
// if the message stays missing is it an error.
func retryLoad(err error, attempt int) bool {
	return errors.Is(err, store.ErrUnknownMessage) && attempt < maxLoadAttempts
}

func (s Ranges) readMiddleOnce(spilled bool, prio uint8, from, to uint64, want int, wantBytes int64, buf []store.EntryMeta) (PageRead, error) {
	metas, err := s.ReadLevel(spilled, prio, from, want, buf)
	if err != nil {
		return PageRead{}, err
	}
	r := PageRead{Metas: metas, Done: len(metas) < want}
	var bytes int64
	for i, m := range metas {
		if m.Seq > to { // resident in the tail, or paged after the read began
			r.Metas, r.Done = metas[:i], true
			break
		}
		if wantBytes > 0 && i > 0 && bytes >= wantBytes {
			clear(metas[i:])
			r.Metas, r.Done = metas[:i], false
			break
		}
		bytes += int64(m.Size)
	}
	ids := make([]store.MsgID, len(r.Metas))
	for i := range r.Metas {
		ids[i] = r.Metas[i].Msg
	}
	r.Msgs = make([]*store.Message, len(ids))
	err = s.Store.LoadMessages(ids, func(i int, m *store.Message) { r.Msgs[i] = m })
	var de *store.DamageError
	if errors.As(err, &de) {
		r.Damage = de
	}
	return r, err
}

// ReadBacklog reads up to max entries of the backlog ranges from seq
// from, merged in seq order (the volatile one only if volatile: anything
// was ever written to it, as the caller saw it).
func (s Ranges) ReadBacklog(volatile bool, from uint64, max int) ([]store.EntryMeta, error) {
	a, err := s.Store.ReadEntries(s.BacklogID(), 0, from, max, nil)
	if err != nil || !volatile {
		return a, err
	}
	v, err := s.Store.ReadEntries(s.VolatileBacklogID(), 0, from, max, nil)
	if err != nil {
		return nil, err
	}
	return MergeBySeq(a, v, max), nil
}

// MergeBySeq merges a and v, each in seq order, into the first max
// entries in seq order (a itself when v is empty).
func MergeBySeq(a, v []store.EntryMeta, max int) []store.EntryMeta {
	if len(v) == 0 {
		return a
	}
	if len(a) == 0 {
		return append(a, v...)
	}
	merged := make([]store.EntryMeta, 0, min(len(a)+len(v), max))
	i, j := 0, 0
	for len(merged) < max && (i < len(a) || j < len(v)) {
		if j == len(v) || i < len(a) && a[i].Seq < v[j].Seq {
			merged = append(merged, a[i])
			i++
		} else {
			merged = append(merged, v[j])
			j++
		}
	}
	clear(a)
	return merged
}

// ReadDue reads the entries refs name (one point read each, wherever they
// lie: Store.ReadRefs) with their messages, for entries about to expire:
// a gone entry is left out, and so is a dead letter waiting for a route or
// an entry without a deadline (not the entry the ref was taken for), and
// one whose message is damaged (a read of its middle reports it).
func ReadDue(st store.Store, refs []store.Ref) ([]store.EntryMeta, []*store.Message, error) {
	for attempt := 1; ; attempt++ {
		metas, msgs, err := readDueOnce(st, refs)
		if !retryLoad(err, attempt) {
			return metas, msgs, err
		}
	}
}

func readDueOnce(st store.Store, refs []store.Ref) ([]store.EntryMeta, []*store.Message, error) {
	read, err := st.ReadRefs(refs, nil)
	if err != nil {
		return nil, nil, err
	}
	metas := read[:0]
	for _, m := range read {
		if m.DeadLetter == "" && m.Deadline != 0 {
			metas = append(metas, m)
		}
	}
	ids := make([]store.MsgID, len(metas))
	for i := range metas {
		ids[i] = metas[i].Msg
	}
	msgs := make([]*store.Message, len(ids))
	err = st.LoadMessages(ids, func(i int, m *store.Message) { msgs[i] = m })
	var de *store.DamageError
	if errors.As(err, &de) {
		// Left where they are: the read of their middle finds the
		// damage too and takes them out of the queue as lost.
		n := 0
		for i := range metas {
			if msgs[i] != nil {
				metas[n], msgs[n] = metas[i], msgs[i]
				n++
			}
		}
		metas, msgs, err = metas[:n], msgs[:n], nil
	}
	if err != nil {
		return nil, nil, err
	}
	return metas, msgs, nil
}
