package defs

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/brokerd/brokerd/store"
)

// maxLimits bounds the limits a decoded record may hold (RabbitMQ knows
// two per kind; the bound only stops a corrupt count from allocating).
const maxLimits = 64

// Limits is a vhost's or a user's limits record: each limit's name
// (max-connections, max-queues, max-channels) and value. Owner is the
// vhost's or the user's name.
type Limits struct {
	Owner  string
	Limits map[string]int64
}

// EncodeVHostLimits returns the record of a vhost's limits.
func EncodeVHostLimits(d Limits) store.MetaOp {
	return store.MetaOp{Key: VHostLimitsKey(d.Owner), Value: appendLimits(d.Limits)}
}

// EncodeUserLimits returns the record of a user's limits.
func EncodeUserLimits(d Limits) store.MetaOp {
	return store.MetaOp{Key: UserLimitsKey(d.Owner), Value: appendLimits(d.Limits)}
}

// appendLimits encodes limits sorted by name: uvarint(n), then per limit
// bytes(name) varint(value) (zigzag).
func appendLimits(limits map[string]int64) []byte {
	v := binary.AppendUvarint([]byte{Version}, uint64(len(limits)))
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		v = appendBytes(v, []byte(name))
		v = binary.AppendVarint(v, limits[name])
	}
	return v
}

// DecodeVHostLimits decodes a record EncodeVHostLimits wrote.
func DecodeVHostLimits(key string, v []byte) (Limits, error) {
	return decodeLimits(key, PrefixVHostLimits, v)
}

// DecodeUserLimits decodes a record EncodeUserLimits wrote.
func DecodeUserLimits(key string, v []byte) (Limits, error) {
	return decodeLimits(key, PrefixUserLimits, v)
}

func decodeLimits(key, prefix string, v []byte) (Limits, error) {
	p, err := Parts(key, prefix, 1)
	if err != nil {
		return Limits{}, err
	}
	r := newRecReader(v)
	n := r.uvarint()
	if r.err == nil && (n > maxLimits || n > uint64(len(r.b))) {
		return Limits{}, fmt.Errorf("%w: %d limits", ErrCorrupt, n)
	}
	d := Limits{Owner: p[0], Limits: make(map[string]int64, n)}
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := string(r.bytes())
		if r.err != nil {
			break
		}
		x, k := binary.Varint(r.b)
		if k <= 0 {
			return Limits{}, fmt.Errorf("%w: limit %q: bad varint", ErrCorrupt, name)
		}
		r.b = r.b[k:]
		d.Limits[name] = x
	}
	if r.err != nil {
		return Limits{}, r.err
	}
	return d, nil
}

// TopicPerm is a user's topic permissions on an exchange of a vhost: the
// sources of the write and read patterns on routing keys.
type TopicPerm struct {
	VHost, User, Exchange string
	Write, Read           string
}

// EncodeTopicPerm returns the record of d: bytes(write) bytes(read).
func EncodeTopicPerm(d TopicPerm) store.MetaOp {
	v := appendBytes([]byte{Version}, []byte(d.Write))
	return store.MetaOp{Key: TopicPermKey(d.VHost, d.User, d.Exchange), Value: appendBytes(v, []byte(d.Read))}
}

// DecodeTopicPerm decodes a record EncodeTopicPerm wrote.
func DecodeTopicPerm(key string, v []byte) (TopicPerm, error) {
	p, err := Parts(key, PrefixTopicPerm, 3)
	if err != nil {
		return TopicPerm{}, err
	}
	r := newRecReader(v)
	d := TopicPerm{VHost: p[0], User: p[1], Exchange: p[2], Write: string(r.bytes()), Read: string(r.bytes())}
	if r.err != nil {
		return TopicPerm{}, r.err
	}
	return d, nil
}
