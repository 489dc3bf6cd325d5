package diskstore

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
)

// pointReader looks keys up in the live index through one iterator: a run
// of lookups in ascending key order costs one forward seek each, where a
// Get builds and tears down an iterator per key. Reading a window's
// message records and a checkpoint's deleted entries is such a run.
type pointReader struct {
	it *pebble.Iterator
	// stepped: the last lookup got there by Next, so the run is dense
	// and the next one may step as far; after a seek it tries one Next.
	stepped bool
}

func (s *Store) newPointReader() (*pointReader, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	return &pointReader{it: it}, nil
}

// nextBeforeSeek is how many keys get steps over with Next before it
// seeks instead, while lookups keep finding their key that way (after a
// seek it tries one). The runs it serves are mostly dense (a window's
// messages were published in id order; a checkpoint deletes the entries
// a consumer acked), and a Next costs a fraction of a seek, which
// repositions every level of the LSM (a third of a drain's CPU went to
// those seeks); a sparse run wastes one Next per lookup.
const nextBeforeSeek = 8

// get returns key's value, valid until the next call, and whether the key
// is there.
func (p *pointReader) get(key []byte) ([]byte, bool, error) {
	p.stepped = p.step(key)
	if !p.stepped {
		if !p.it.SeekGE(key) {
			return nil, false, p.it.Error()
		}
	}
	if !p.it.Valid() || !bytes.Equal(p.it.Key(), key) {
		return nil, false, p.it.Error()
	}
	v, err := p.it.ValueAndErr()
	return v, err == nil, err
}

// step moves the iterator forward from where the last lookup left it to
// the first key >= key, by at most nextBeforeSeek Nexts (one after a
// seek), and reports whether it got there (or to the end: then key is not
// there either). It reports false, leaving a seek to the caller, if the
// iterator is not positioned, is past key already, or did not reach it.
func (p *pointReader) step(key []byte) bool {
	if !p.it.Valid() || bytes.Compare(p.it.Key(), key) > 0 {
		return false
	}
	n := 1
	if p.stepped {
		n = nextBeforeSeek
	}
	for range n {
		if bytes.Compare(p.it.Key(), key) >= 0 {
			return true
		}
		if !p.it.Next() {
			return p.it.Error() == nil // at the end: no key >= key
		}
	}
	return bytes.Compare(p.it.Key(), key) >= 0
}

func (p *pointReader) close() error { return p.it.Close() }

// msgValue is Store.msgValue through p; key is scratch space.
func (p *pointReader) msgValue(id store.MsgID, key []byte) (index.MsgValue, bool, error) {
	var mv index.MsgValue
	raw, ok, err := p.get(index.MsgKey(key[:0], uint64(id)))
	if err != nil {
		return mv, false, fmt.Errorf("read message %d: %w", id, err)
	}
	if !ok {
		return mv, false, nil
	}
	if err := index.DecodeMsgValue(slices.Clone(raw), &mv); err != nil {
		return mv, false, fmt.Errorf("read message %d: %w", id, err)
	}
	return mv, true, nil
}
