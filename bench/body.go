package main

import (
	"encoding/binary"
	"errors"
	"time"
)

// A benchmark message body starts with a 28-byte header, then padding up
// to -size:
//
//	magic "bnch" | producer uint32 | seq uint64 | sent unix ns int64 | ttl ms uint32
//
// The consumer side checks the magic, so a stray message from outside the
// run is told apart.
const bodyHeader = 28

var bodyMagic = [4]byte{'b', 'n', 'c', 'h'}

func makeBody(buf []byte, size, producer int, seq uint64, sent time.Time, ttlMS uint32) []byte {
	n := max(size, bodyHeader)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	b := buf[:n]
	copy(b, bodyMagic[:])
	binary.BigEndian.PutUint32(b[4:], uint32(producer))
	binary.BigEndian.PutUint64(b[8:], seq)
	binary.BigEndian.PutUint64(b[16:], uint64(sent.UnixNano()))
	binary.BigEndian.PutUint32(b[24:], ttlMS)
	return b
}

type bodyInfo struct {
	producer int
	seq      uint64
	sent     time.Time
	ttlMS    uint32
}

var errNotOurs = errors.New("bench: message is not a benchmark message")

func parseBody(b []byte) (bodyInfo, error) {
	if len(b) < bodyHeader || [4]byte(b[:4]) != bodyMagic {
		return bodyInfo{}, errNotOurs
	}
	return bodyInfo{
		producer: int(binary.BigEndian.Uint32(b[4:])),
		seq:      binary.BigEndian.Uint64(b[8:]),
		sent:     time.Unix(0, int64(binary.BigEndian.Uint64(b[16:]))),
		ttlMS:    binary.BigEndian.Uint32(b[24:]),
	}, nil
}
