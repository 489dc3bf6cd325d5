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
}

func (s *Store) newPointReader() (*pointReader, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	return &pointReader{it: it}, nil
}

// get returns key's value, valid until the next call, and whether the key
// is there.
func (p *pointReader) get(key []byte) ([]byte, bool, error) {
	if !p.it.SeekGE(key) {
		return nil, false, p.it.Error()
	}
	if !bytes.Equal(p.it.Key(), key) {
		return nil, false, nil
	}
	v, err := p.it.ValueAndErr()
	return v, err == nil, err
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
