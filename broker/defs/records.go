package defs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

const (
	flagAutoDelete byte = 1 << 0 // on-disk format
	flagInternal   byte = 1 << 1 // on-disk format (exchanges)
	flagBacklog    byte = 1 << 1 // on-disk format (queues)
)

// VHost is a vhost's record: its name and metadata.
type VHost struct {
	Name                          string
	Description, DefaultQueueType string
	Tags                          []string // nil when decoded without any
}

// EncodeVHost returns the record of d. A vhost without metadata is written
// as one from before vhosts had metadata: the version alone.
func EncodeVHost(d VHost) store.MetaOp {
	v := []byte{Version}
	if d.Description != "" || d.DefaultQueueType != "" || len(d.Tags) > 0 {
		v = appendBytes(v, []byte(d.Description))
		v = appendBytes(v, []byte(d.DefaultQueueType))
		v = appendStrings(v, d.Tags)
	}
	return store.MetaOp{Key: VHostKey(d.Name), Value: v}
}

// DecodeVHost decodes a record EncodeVHost wrote.
func DecodeVHost(key string, v []byte) (VHost, error) {
	p, err := Parts(key, PrefixVHost, 1)
	if err != nil {
		return VHost{}, err
	}
	d := VHost{Name: p[0]}
	r := newRecReader(v)
	if r.err == nil && len(r.b) > 0 {
		d.Description = string(r.bytes())
		d.DefaultQueueType = string(r.bytes())
		d.Tags = r.strings()
	}
	if r.err != nil {
		return VHost{}, r.err
	}
	return d, nil
}

// User is a user's record.
type User struct {
	Name string
	// Algorithm is the password hashing algorithm's RabbitMQ name
	// (rabbit_password_hashing_sha256); DecodeUser does not check it,
	// the broker knows the algorithms.
	Algorithm string
	Hash      []byte   // salt ++ digest; empty: no password
	Tags      []string // nil when decoded without any
}

// EncodeUser returns the record of d.
func EncodeUser(d User) store.MetaOp {
	v := appendBytes([]byte{Version}, []byte(d.Algorithm))
	v = appendBytes(v, d.Hash)
	return store.MetaOp{Key: UserKey(d.Name), Value: appendStrings(v, d.Tags)}
}

// DecodeUser decodes a record EncodeUser wrote. Hash is a copy, non-nil.
func DecodeUser(key string, v []byte) (User, error) {
	p, err := Parts(key, PrefixUser, 1)
	if err != nil {
		return User{}, err
	}
	r := newRecReader(v)
	d := User{Name: p[0], Algorithm: string(r.bytes())}
	d.Hash = bytes.Clone(r.bytes())
	d.Tags = r.strings()
	if r.err != nil {
		return User{}, r.err
	}
	return d, nil
}

// Perm is a user's permissions in a vhost: the sources of the three
// patterns.
type Perm struct {
	VHost, User            string
	Configure, Write, Read string
}

// EncodePerm returns the record of d.
func EncodePerm(d Perm) store.MetaOp {
	v := appendBytes([]byte{Version}, []byte(d.Configure))
	v = appendBytes(v, []byte(d.Write))
	return store.MetaOp{Key: PermKey(d.VHost, d.User), Value: appendBytes(v, []byte(d.Read))}
}

// DecodePerm decodes a record EncodePerm wrote.
func DecodePerm(key string, v []byte) (Perm, error) {
	p, err := Parts(key, PrefixPerm, 2)
	if err != nil {
		return Perm{}, err
	}
	r := newRecReader(v)
	d := Perm{VHost: p[0], User: p[1], Configure: string(r.bytes()), Write: string(r.bytes()), Read: string(r.bytes())}
	if r.err != nil {
		return Perm{}, r.err
	}
	return d, nil
}

// Exchange is a durable exchange's record.
type Exchange struct {
	VHost, Name          string
	Type                 string
	AutoDelete, Internal bool
	Args                 amqp.Table
}

// EncodeExchange returns the record of d.
func EncodeExchange(d Exchange) store.MetaOp {
	var flags byte
	if d.AutoDelete {
		flags |= flagAutoDelete
	}
	if d.Internal {
		flags |= flagInternal
	}
	v := []byte{Version}
	v = appendBytes(v, []byte(d.Type))
	v = append(v, flags)
	return store.MetaOp{Key: ExchangeKey(d.VHost, d.Name), Value: appendBytes(v, EncodeArgs(d.Args))}
}

// DecodeExchange decodes a record EncodeExchange wrote.
func DecodeExchange(key string, v []byte) (Exchange, error) {
	p, err := Parts(key, PrefixExchange, 2)
	if err != nil {
		return Exchange{}, err
	}
	r := newRecReader(v)
	d := Exchange{VHost: p[0], Name: p[1], Type: string(r.bytes())}
	flags := r.byte()
	args := r.bytes()
	if r.err != nil {
		return Exchange{}, r.err
	}
	d.AutoDelete, d.Internal = flags&flagAutoDelete != 0, flags&flagInternal != 0
	if d.Args, err = DecodeArgs(args); err != nil {
		return Exchange{}, fmt.Errorf("%w: arguments: %w", ErrCorrupt, err)
	}
	return d, nil
}

// Queue is a durable queue's record (only durable, non-exclusive queues
// have one).
type Queue struct {
	VHost, Name string
	ID          uint64 // the queue's store.QueueID; never 0
	AutoDelete  bool
	// Backlog is the flag of a layout before the stored backlog: dead
	// letters wait among the queue's entries (see the package doc).
	Backlog bool
	Args    amqp.Table
	// Marks are the delivered marks by priority level; none are written
	// unless one is above 0. EncodeQueue only reads them.
	Marks []uint64
}

// EncodeQueue returns the record of d.
func EncodeQueue(d Queue) store.MetaOp {
	var flags byte
	if d.AutoDelete {
		flags |= flagAutoDelete
	}
	if d.Backlog {
		flags |= flagBacklog
	}
	v := binary.AppendUvarint([]byte{Version}, d.ID)
	v = append(v, flags)
	v = appendBytes(v, EncodeArgs(d.Args))
	v = appendMarks(v, d.Marks)
	return store.MetaOp{Key: QueueKey(d.VHost, d.Name), Value: v}
}

// DecodeQueue decodes a record EncodeQueue wrote.
func DecodeQueue(key string, v []byte) (Queue, error) {
	p, err := Parts(key, PrefixQueue, 2)
	if err != nil {
		return Queue{}, err
	}
	r := newRecReader(v)
	d := Queue{VHost: p[0], Name: p[1], ID: r.uvarint()}
	flags := r.byte()
	args := r.bytes()
	d.Marks = r.marks()
	if r.err != nil {
		return Queue{}, r.err
	}
	if d.ID == 0 {
		return Queue{}, fmt.Errorf("%w: queue id 0", ErrCorrupt)
	}
	d.AutoDelete = flags&flagAutoDelete != 0
	d.Backlog = flags&flagBacklog != 0
	if d.Args, err = DecodeArgs(args); err != nil {
		return Queue{}, fmt.Errorf("%w: arguments: %w", ErrCorrupt, err)
	}
	return d, nil
}

// Binding is a durable binding's record: all of it is in the key.
type Binding struct {
	VHost, Source string
	// Dest is the destination's name: an exchange's if ToExchange is set
	// (an exchange-to-exchange binding), else a queue's.
	Dest       string
	ToExchange bool
	Key        string     // routing key
	Args       amqp.Table // part of the binding's identity
}

// EncodeBinding returns the record of d.
func EncodeBinding(d Binding) store.MetaOp {
	return store.MetaOp{Key: BindingKey(d), Value: []byte{Version}}
}

// DecodeBinding decodes a record EncodeBinding wrote.
func DecodeBinding(key string, v []byte) (Binding, error) {
	p, err := Parts(key, PrefixBinding, 6)
	if err != nil {
		return Binding{}, err
	}
	if err := newRecReader(v).err; err != nil {
		return Binding{}, err
	}
	args, err := DecodeArgs([]byte(p[5]))
	if err != nil {
		return Binding{}, fmt.Errorf("%w: arguments: %w", ErrCorrupt, err)
	}
	d := Binding{VHost: p[0], Source: p[1], Dest: p[3], Key: p[4], Args: args}
	switch p[2] {
	case bindToQueue:
	case bindToExchange:
		d.ToExchange = true
	default:
		return Binding{}, fmt.Errorf("%w: binding destination kind %q", ErrCorrupt, p[2])
	}
	return d, nil
}

// Policy is a policy's or an operator policy's record.
type Policy struct {
	Operator    bool // an operator policy (PrefixOperatorPolicy)
	VHost, Name string
	Pattern     string
	ApplyTo     string
	Priority    int
	// Definition maps policy keys to JSON-encodable values; decoded
	// numbers are json.Number.
	Definition map[string]any
}

// policyDef is a policy's stored JSON document.
type policyDef struct {
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   int            `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// EncodePolicy returns the record of d. It panics if d.Definition does
// not encode as JSON: a validated policy holds strings, numbers, booleans
// and lists of them.
func EncodePolicy(d Policy) store.MetaOp {
	doc, err := json.Marshal(policyDef{Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: d.Priority, Definition: d.Definition})
	if err != nil {
		panic(fmt.Sprintf("encode policy %q: %v", d.Name, err))
	}
	return store.MetaOp{Key: PolicyKey(d.Operator, d.VHost, d.Name), Value: append([]byte{Version}, doc...)}
}

// DecodePolicy decodes a record EncodePolicy wrote, of either kind.
// Only the first JSON value after the version is read.
func DecodePolicy(key string, v []byte) (Policy, error) {
	operator := strings.HasPrefix(key, PrefixOperatorPolicy)
	p, err := Parts(key, policyPrefix(operator), 2)
	if err != nil {
		return Policy{}, err
	}
	r := newRecReader(v)
	doc := r.rest()
	if r.err != nil {
		return Policy{}, r.err
	}
	var pd policyDef
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&pd); err != nil {
		return Policy{}, fmt.Errorf("%w: policy document: %w", ErrCorrupt, err)
	}
	return Policy{Operator: operator, VHost: p[0], Name: p[1], Pattern: pd.Pattern, ApplyTo: pd.ApplyTo, Priority: pd.Priority, Definition: pd.Definition}, nil
}

// EncodeQueueIDMark returns the record of the highest queue id given to a
// durable queue.
func EncodeQueueIDMark(id uint64) store.MetaOp {
	return store.MetaOp{Key: KeyQueueIDMark, Value: binary.AppendUvarint([]byte{Version}, id)}
}

// DecodeQueueIDMark decodes a record EncodeQueueIDMark wrote.
func DecodeQueueIDMark(key string, v []byte) (uint64, error) {
	if _, err := Parts(key, KeyQueueIDMark, 0); err != nil {
		return 0, err
	}
	r := newRecReader(v)
	id := r.uvarint()
	return id, r.err
}

// EncodeBootstrapMark returns the record saying the bootstrap vhosts and
// users were created.
func EncodeBootstrapMark() store.MetaOp {
	return store.MetaOp{Key: KeyBootstrapMark, Value: []byte{Version}}
}

// DecodeBootstrapMark checks a record EncodeBootstrapMark wrote.
func DecodeBootstrapMark(key string, v []byte) error {
	if _, err := Parts(key, KeyBootstrapMark, 0); err != nil {
		return err
	}
	return newRecReader(v).err
}

// QueueState is a durable queue's mutable state, which the queue engine
// rewrites as it runs: its delivered marks and the backlog flag of an
// older layout. It is kept apart from the queue's definition (Queue),
// which changes only by declaration, so that the two can be written by
// different owners (a replicated queue's state travels with its data,
// its definition with the other definitions). Keyed by the queue's id,
// never reused.
//
// A queue written before this record existed keeps both in its Queue
// record; once a QueueState is stored for it, the QueueState wins.
type QueueState struct {
	ID uint64 // the queue's store.QueueID; never 0
	// Backlog is Queue.Backlog's flag, as the engine last wrote it.
	Backlog bool
	// Marks are the delivered marks by priority level (none written
	// unless one is above 0, as in Queue).
	Marks []uint64
}

// QueueStateKey is the key of queue id's state.
func QueueStateKey(id uint64) string { return Key(PrefixQueueState, fmt.Sprintf("%016x", id)) }

// EncodeQueueState returns the record of d.
func EncodeQueueState(d QueueState) store.MetaOp {
	var flags byte
	if d.Backlog {
		flags |= flagBacklog
	}
	v := append([]byte{Version}, flags)
	v = appendMarks(v, d.Marks)
	return store.MetaOp{Key: QueueStateKey(d.ID), Value: v}
}

// DecodeQueueState decodes a record EncodeQueueState wrote.
func DecodeQueueState(key string, v []byte) (QueueState, error) {
	p, err := Parts(key, PrefixQueueState, 1)
	if err != nil {
		return QueueState{}, err
	}
	id, err := strconv.ParseUint(p[0], 16, 64)
	if err != nil || id == 0 || fmt.Sprintf("%016x", id) != p[0] { // only the key QueueStateKey writes
		return QueueState{}, fmt.Errorf("%w: queue state key %q", ErrCorrupt, key)
	}
	r := newRecReader(v)
	d := QueueState{ID: id}
	flags := r.byte()
	d.Marks = r.marks()
	if r.err != nil {
		return QueueState{}, r.err
	}
	if len(r.b) > 0 {
		return QueueState{}, fmt.Errorf("%w: %d bytes after a queue state", ErrCorrupt, len(r.b))
	}
	d.Backlog = flags&flagBacklog != 0
	return d, nil
}

// appendMarks appends delivered marks as a queue's records keep them:
// nothing unless one is above 0, else their count and each one.
func appendMarks(v []byte, marks []uint64) []byte {
	if !slices.ContainsFunc(marks, func(m uint64) bool { return m > 0 }) {
		return v
	}
	v = binary.AppendUvarint(v, uint64(len(marks)))
	for _, m := range marks {
		v = binary.AppendUvarint(v, m)
	}
	return v
}
