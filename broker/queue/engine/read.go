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

// damageErr is the read's error for its damage: Damage, or nil.
func (r *PageRead) damageErr() error {
	if r.Damage != nil {
		return r.Damage
	}
	return nil
}

// ReadMiddle reads up to want entries of level prio from seq from, up to
// seq to, with their messages, and if wantBytes > 0 only as many as hold
// wantBytes resident bytes (Resident: bodies and properties; at least
// one). A message's properties are known only once it is loaded, so where
// the bytes bind the read goes in chunks, each its entries (ReadLevel) and
// then their messages (one Store.LoadMessages), sized by per, the caller's
// estimate of an entry's resident bytes (Level.MeanResident; 0: unknown,
// then a first chunk of probeChunk entries), and refined by what each
// chunk holds: what is left out is never loaded, and a window of large
// headers is not read whole to be cut. Without a byte bound, or with a
// good estimate, it is one chunk. It touches no queue state: callers hold
// the queue's lock or not.
func (s Ranges) ReadMiddle(spilled bool, prio uint8, from, to uint64, want int, wantBytes, per int64, buf []store.EntryMeta) (PageRead, error) {
	var r PageRead
	for attempt := 1; ; attempt++ {
		var err error
		r, err = s.readMiddleOnce(spilled, prio, from, to, want, wantBytes, per, buf)
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

// probeChunk is the first chunk of a read bounded by bytes when nothing is
// known of the entries' size.
const probeChunk = 8

// Resident is what an entry read from the store holds in memory once
// resident, as the broker's EntryResident counts it: its body and its
// properties (its own, or else its message's).
func Resident(m *store.EntryMeta, msg *store.Message) int64 {
	n := int64(m.Size)
	if m.Header != nil {
		n += int64(len(m.Header.Props))
	} else if msg != nil {
		n += int64(len(msg.Header.Props))
	}
	return n
}

func (s Ranges) readMiddleOnce(spilled bool, prio uint8, from, to uint64, want int, wantBytes, per int64, buf []store.EntryMeta) (PageRead, error) {
	r := PageRead{Metas: buf[:0]}
	var bytes int64
	for len(r.Metas) < want {
		ask := want - len(r.Metas)
		if wantBytes > 0 {
			if per > 0 {
				ask = int(min(int64(ask), (wantBytes-bytes+per-1)/per))
			} else {
				ask = min(ask, probeChunk)
			}
		}
		var dst []store.EntryMeta
		if len(r.Metas) == 0 {
			dst = buf[:0] // the caller's buffer, for the common single chunk
		}
		chunk, err := s.ReadLevel(spilled, prio, from, ask, dst)
		if err != nil {
			return r, err
		}
		end := len(chunk) < ask // the level has no more
		for i := range chunk {
			if chunk[i].Seq > to { // resident in the tail, or paged after the read began
				clear(chunk[i:])
				chunk, end = chunk[:i], true
				break
			}
		}
		ids := make([]store.MsgID, len(chunk))
		for i := range chunk {
			ids[i] = chunk[i].Msg
		}
		msgs := make([]*store.Message, len(ids))
		if err := s.Store.LoadMessages(ids, func(i int, m *store.Message) { msgs[i] = m }); err != nil {
			var de *store.DamageError
			if !errors.As(err, &de) {
				return r, err
			}
			// The damaged messages stay nil; the read goes on.
			if r.Damage == nil {
				r.Damage = &store.DamageError{}
			}
			r.Damage.Damage = append(r.Damage.Damage, de.Damage...)
		}
		keep := len(chunk)
		var sum int64
		for i := range chunk {
			if wantBytes > 0 && bytes >= wantBytes && len(r.Metas)+i > 0 {
				keep = i
				break
			}
			n := Resident(&chunk[i], msgs[i])
			bytes += n
			sum += n
		}
		full := wantBytes > 0 && bytes >= wantBytes
		clear(chunk[keep:])
		if len(r.Metas) == 0 {
			r.Metas = chunk[:keep]
		} else {
			r.Metas = append(r.Metas, chunk[:keep]...)
		}
		r.Msgs = append(r.Msgs, msgs[:keep]...)
		switch {
		case end && keep == len(chunk):
			r.Done = true
			return r, r.damageErr()
		case full: // Done stays false: the middle goes on
			return r, r.damageErr()
		}
		per = max(sum/int64(keep), 1)
		from = chunk[keep-1].Seq + 1
	}
	return r, r.damageErr()
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
