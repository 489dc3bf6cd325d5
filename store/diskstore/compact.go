package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
)

// compactLimit bounds the bytes one compaction round rewrites, so a round
// never holds the checkpoint goroutine for long.
const compactLimit = 256 << 20

// Compact rewrites the live messages of mostly-dead segments (live bytes
// below Options.CompactBelow of the file) into a new segment and removes
// the old files, so disk use follows live data. The checkpoint goroutine
// runs it after each checkpoint; it holds the checkpoint lock, so nothing
// else changes message records meanwhile. A compaction that fails changes
// nothing (the files it wrote are removed) and is tried again after the
// next checkpoint.
func (s *Store) Compact() (err error) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	var cands []segment.ID
	var total int64
	for id, st := range s.cp.segs {
		if _, bad := s.cp.damaged[id]; bad {
			continue
		}
		if st.TotalBytes > 0 && float64(st.LiveBytes) < s.opts.CompactBelow*float64(st.TotalBytes) {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	slices.Sort(cands)
	for i, id := range cands {
		total += s.cp.segs[id].LiveBytes
		if total > compactLimit && i > 0 {
			cands = cands[:i]
			break
		}
	}
	w, err := s.segs.NewWriter()
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			w.Abort()
			s.cp.orphans = append(s.cp.orphans, w.Segments()...)
			s.removeOrphans()
		}
	}()
	b := s.db.NewBatch()
	defer b.Close()
	fresh := make(map[segment.ID]*index.SegmentState)
	var key, val []byte
	moved := 0
	// Message records in one sweep per segment: a segment holds its
	// messages mostly in id order.
	pr, err := s.newPointReader()
	if err != nil {
		return err
	}
	defer pr.close()
	for _, old := range cands {
		err := s.segs.Scan(old, func(loc segment.Loc, blob []byte) error {
			id, err := blobMsgID(blob)
			if err != nil {
				return err
			}
			mv, ok, err := pr.msgValue(id, key)
			if err != nil || !ok {
				return err
			}
			if cur, err := segment.DecodeLoc(mv.Loc); err != nil || cur != loc {
				return err // a stale copy: the message lives elsewhere
			}
			nloc, err := w.Add(blob)
			if err != nil {
				return err
			}
			st := fresh[nloc.Seg]
			if st == nil {
				st = new(index.SegmentState)
				fresh[nloc.Seg] = st
			}
			st.LiveMsgs++
			st.LiveBytes += int64(nloc.Len)
			st.TotalBytes += int64(nloc.Len)
			mv.Loc = segment.AppendLoc(nil, nloc)
			key = index.MsgKey(key[:0], uint64(id))
			val = index.AppendMsgValue(val[:0], &mv)
			moved++
			return b.Set(key, val, nil)
		})
		if err != nil {
			var ce *segment.CorruptError
			if errors.As(err, &ce) {
				s.compactionDamaged(old, ce)
				return nil // what it wrote is removed (above)
			}
			return fmt.Errorf("compact segment %d: %w", old, err)
		}
	}
	if err := w.Finish(); err != nil {
		return fmt.Errorf("finish compacted segment: %w", err)
	}
	for _, old := range cands {
		key = index.SegmentKey(key[:0], uint32(old))
		if err := b.Delete(key, nil); err != nil {
			return err
		}
	}
	for id, st := range fresh {
		key = index.SegmentKey(key[:0], uint32(id))
		val = index.AppendSegmentState(val[:0], st)
		if err := b.Set(key, val, nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit compaction: %w", err)
	}
	committed = true
	for _, old := range cands {
		delete(s.cp.segs, old)
	}
	for id, st := range fresh {
		s.cp.segs[id] = st
	}
	s.log.Debug("compacted segments", "segments", len(cands), "messages", moved)
	s.cp.orphans = append(s.cp.orphans, cands...)
	s.removeOrphans()
	return nil
}

// compactionDamaged records that a compaction met a damaged block in
// segment old: the segment stays as it is and is never compacted again.
// Its intact blocks are read where they are, and the messages of the
// damaged one are reported as damage when read (LoadMessages), so the
// broker takes them out of their queues; once no live message is left in
// the segment, a checkpoint removes it as any other. The compaction's
// output (written, never committed) is removed by Compact.
func (s *Store) compactionDamaged(old segment.ID, ce *segment.CorruptError) {
	if s.cp.damaged == nil {
		s.cp.damaged = make(map[segment.ID]string)
	}
	s.cp.damaged[old] = ce.Error()
	s.log.Error("segment: damaged block found by compaction; the segment is left as it is",
		"segment", old, "file", ce.File, "offset", ce.Offset, "reason", ce.Reason)
}

// blobMsgID reads the message id at the front of a blob without decoding
// the rest.
func blobMsgID(blob []byte) (store.MsgID, error) {
	if len(blob) < 2 || blob[0] != blobVersion {
		return 0, fmt.Errorf("%w: blob header", errCorrupt)
	}
	id, n := binary.Uvarint(blob[1:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: blob message id", errCorrupt)
	}
	return store.MsgID(id), nil
}
