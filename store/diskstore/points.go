package diskstore

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
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
