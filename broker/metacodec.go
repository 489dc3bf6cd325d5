package broker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
)

// Durable definitions live in the store's meta space, one record per
// definition. Names are bytes: AMQP short strings need not be UTF-8 and
// may contain NUL, and a name comes back from the store exactly as it was
// declared.
//
// # Keys
//
// A key is a kind prefix followed by name parts:
//
//	v/ <vhost>
//	x/ <vhost> <exchange>
//	q/ <vhost> <queue>
//	b/ <vhost> <source> <"q"|"x"> <destination> <routing key> <args>
//	p/ <vhost> <policy>
//	o/ <vhost> <operator policy>
//	a/ <vhost> <user>                a user's permissions in a vhost
//	u/ <user>
//	n/queue-id                      (no parts)
//	n/bootstrapped                  (no parts)
//
// Each part is its bytes with every 0x00 written as 0x00 0xff, then the
// terminator 0x00 0x01:
//
//	part := ( byte != 0x00 | 0x00 0xff )* 0x00 0x01
//
// So no part's encoding is a prefix of another's: keys of different tuples
// never collide, and a vhost's keys of one kind are exactly those starting
// with the kind and the vhost's part (ScanMeta by that prefix lists them).
// The encoding keeps byte order, so definitions come back sorted by name.
// <args> is the binding's argument table in its AMQP encoding, part of the
// binding's identity (RabbitMQ's too).
//
// Every kind whose first part is the vhost is listed in vhostMetaKinds:
// deleting a vhost deletes every record under each of those prefixes.
//
// # Values
//
// Every value starts with a version byte (metaVersion). Then, with
// bytes := uvarint(len) || len bytes:
//
//	vhost     [bytes(description) bytes(default queue type) uvarint(n) bytes(tag)*n]
//	          (a vhost written before metadata existed has none: all empty)
//	exchange  bytes(type) flags(1: bit 0 auto-delete, bit 1 internal) bytes(args)
//	queue     uvarint(queue id) flags(1: bit 0 auto-delete, bit 1 backlog) bytes(args)
//	          [uvarint(n) uvarint(mark)*n]  delivered marks by priority level (marks.go)
//	binding   (nothing: the key says it all)
//	policy    the JSON document {"pattern","apply-to","priority","definition"}
//	          (operator policies alike)
//	queue-id  uvarint(highest queue id ever given to a durable queue)
//	user      bytes(hashing algorithm) bytes(password hash) uvarint(n) bytes(tag)*n
//	          the algorithm by RabbitMQ's name (rabbit_password_hashing_sha256);
//	          the hash as raw bytes, salt first; empty: the user has no password
//	permission bytes(configure) bytes(write) bytes(read), the regexes' sources
//	bootstrapped (nothing): Options.VHosts and Options.Users were created
//
// A queue's backlog flag was set, by a layout before the stored backlog
// range (backlog.go), while dead letters waited for a route among its
// entries: recovery then reads its entries instead of only its counters.
// Nothing sets it any more; it clears once such a backlog drains (see
// Queue.clearBacklogFlagLocked).
//
// Argument tables are in their AMQP encoding, so they come back bit for
// bit. A decoder accepts trailing bytes after the fields it knows (a later
// version may append fields) but nothing shorter.
const (
	metaVHost    = "v/"
	metaExchange = "x/"
	metaQueue    = "q/"
	metaBinding  = "b/"
	metaPolicy   = "p/"
	metaPerm     = "a/"
	metaUser     = "u/"
	// metaOperatorPolicy holds operator policies, as metaPolicy policies.
	metaOperatorPolicy = "o/" // on-disk format; never renumber
	// metaQueueIDMark holds the highest queue id ever given to a durable
	// queue, so ids are never reused after a restart even when that queue
	// is gone (its entries could otherwise surface in a new queue).
	metaQueueIDMark = "n/queue-id"
	// metaBootstrapMark is written when the bootstrap vhosts and users
	// have been created: they are created once, on a fresh data dir, as
	// RabbitMQ's default_vhost and default_user.
	metaBootstrapMark = "n/bootstrapped"

	metaVersion byte = 1 // on-disk format; never renumber

	partEscape byte = 0xff // 0x00 0xff: a 0x00 inside a part; on-disk format
	partEnd    byte = 0x01 // 0x00 0x01: end of a part; on-disk format

	bindToQueue    = "q" // on-disk format
	bindToExchange = "x" // on-disk format

	flagAutoDelete byte = 1 << 0 // on-disk format
	flagInternal   byte = 1 << 1 // on-disk format
	flagBacklog    byte = 1 << 1 // on-disk format (queues)
)

// vhostMetaKinds lists the kinds whose records belong to one vhost (their
// first part is the vhost's name). DeleteVHost removes every record under
// metaKey(kind, vhost) for each of them, so a per-vhost kind added here is
// deleted with its vhost without more code.
var vhostMetaKinds = []string{metaExchange, metaQueue, metaBinding, metaPolicy, metaOperatorPolicy, metaPerm}

// errMetaCorrupt is wrapped by every decoding error of a definition
// record or key: the store holds something this broker did not write.
var errMetaCorrupt = errors.New("broker: corrupt definition record")

// metaKey returns prefix followed by the encoded parts.
func metaKey(prefix string, parts ...string) string {
	n := len(prefix)
	for _, p := range parts {
		n += len(p) + 2
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteString(prefix)
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			sb.WriteByte(p[i])
			if p[i] == 0 {
				sb.WriteByte(partEscape)
			}
		}
		sb.WriteByte(0)
		sb.WriteByte(partEnd)
	}
	return sb.String()
}

// splitMetaKey decodes the parts of a key after its prefix.
func splitMetaKey(rest string) ([]string, error) {
	var parts []string
	var cur []byte
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c != 0 {
			cur = append(cur, c)
			continue
		}
		if i+1 == len(rest) {
			return nil, fmt.Errorf("%w: key ends inside a part", errMetaCorrupt)
		}
		i++
		switch rest[i] {
		case partEscape:
			cur = append(cur, 0)
		case partEnd:
			parts = append(parts, string(cur))
			cur = cur[:0]
		default:
			return nil, fmt.Errorf("%w: bad escape 0x00 0x%02x in key", errMetaCorrupt, rest[i])
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("%w: key ends inside a part", errMetaCorrupt)
	}
	return parts, nil
}

// metaParts decodes a key of a kind with exactly n parts.
func metaParts(key, prefix string, n int) ([]string, error) {
	if !strings.HasPrefix(key, prefix) {
		return nil, fmt.Errorf("%w: key %q lacks prefix %q", errMetaCorrupt, key, prefix)
	}
	p, err := splitMetaKey(key[len(prefix):])
	if err != nil {
		return nil, err
	}
	if len(p) != n {
		return nil, fmt.Errorf("%w: key %q has %d parts, want %d", errMetaCorrupt, key, len(p), n)
	}
	return p, nil
}

func bindingKey(vhost string, b *Binding) string {
	kind := bindToQueue
	if b.exchange != nil {
		kind = bindToExchange
	}
	return metaKey(metaBinding, vhost, b.Source, kind, b.destName(), b.Key, string(encodeArgs(b.Args)))
}

func encodeArgs(t amqp.Table) []byte {
	b, err := amqp.AppendTable(nil, t)
	if err != nil {
		// Tables come from the wire or from our own code; both encode.
		panic(fmt.Sprintf("encode argument table: %v", err))
	}
	return b
}

func decodeArgs(b []byte) (amqp.Table, error) {
	if len(b) == 0 {
		return nil, nil
	}
	t, _, err := amqp.DecodeTable(b)
	return t, err
}

// --- values ---------------------------------------------------------------

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func encodeExchangeDef(x *Exchange) []byte {
	var flags byte
	if x.AutoDelete {
		flags |= flagAutoDelete
	}
	if x.Internal {
		flags |= flagInternal
	}
	v := []byte{metaVersion}
	v = appendBytes(v, []byte(x.Type))
	v = append(v, flags)
	return appendBytes(v, encodeArgs(x.Args))
}

func encodeQueueDef(q *Queue) []byte {
	var flags byte
	if q.AutoDelete {
		flags |= flagAutoDelete
	}
	if q.backlogMarked {
		flags |= flagBacklog
	}
	v := binary.AppendUvarint([]byte{metaVersion}, uint64(q.id))
	v = append(v, flags)
	v = appendBytes(v, encodeArgs(q.Args))
	if marks := q.marksLocked(); slices.ContainsFunc(marks, func(m uint64) bool { return m > 0 }) {
		v = binary.AppendUvarint(v, uint64(len(marks)))
		for _, m := range marks {
			v = binary.AppendUvarint(v, m)
		}
	}
	return v
}

func encodeQueueIDMark(id uint64) []byte {
	return binary.AppendUvarint([]byte{metaVersion}, id)
}

// recReader decodes one value; the first error sticks.
type recReader struct {
	b   []byte
	err error
}

func newRecReader(b []byte) *recReader {
	r := &recReader{b: b}
	switch {
	case len(b) == 0:
		r.err = fmt.Errorf("%w: empty value", errMetaCorrupt)
	case b[0] != metaVersion:
		r.err = fmt.Errorf("%w: unknown version %d", errMetaCorrupt, b[0])
	default:
		r.b = b[1:]
	}
	return r
}

func (r *recReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", errMetaCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = fmt.Errorf("%w: value too short", errMetaCorrupt)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: length %d beyond the value's end", errMetaCorrupt, n)
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// rest returns what follows the version byte (the policy's JSON).
func (r *recReader) rest() []byte {
	if r.err != nil {
		return nil
	}
	b := r.b
	r.b = nil
	return b
}

type exchangeDef struct {
	Type                 string
	AutoDelete, Internal bool
	Args                 amqp.Table
}

func decodeExchangeDef(v []byte) (exchangeDef, error) {
	r := newRecReader(v)
	d := exchangeDef{Type: string(r.bytes())}
	flags := r.byte()
	args := r.bytes()
	if r.err != nil {
		return d, r.err
	}
	d.AutoDelete, d.Internal = flags&flagAutoDelete != 0, flags&flagInternal != 0
	var err error
	if d.Args, err = decodeArgs(args); err != nil {
		return d, fmt.Errorf("%w: arguments: %w", errMetaCorrupt, err)
	}
	return d, nil
}

type queueDef struct {
	ID         uint64
	AutoDelete bool
	Backlog    bool
	Args       amqp.Table
	Marks      []uint64 // delivered marks by priority level, if any
}

func decodeQueueDef(v []byte) (queueDef, error) {
	r := newRecReader(v)
	d := queueDef{ID: r.uvarint()}
	flags := r.byte()
	args := r.bytes()
	if r.err == nil && len(r.b) > 0 {
		n := r.uvarint()
		if n > 256 {
			return d, fmt.Errorf("%w: %d delivered marks", errMetaCorrupt, n)
		}
		for range n {
			d.Marks = append(d.Marks, r.uvarint())
		}
	}
	if r.err != nil {
		return d, r.err
	}
	if d.ID == 0 {
		return d, fmt.Errorf("%w: queue id 0", errMetaCorrupt)
	}
	d.AutoDelete = flags&flagAutoDelete != 0
	d.Backlog = flags&flagBacklog != 0
	var err error
	if d.Args, err = decodeArgs(args); err != nil {
		return d, fmt.Errorf("%w: arguments: %w", errMetaCorrupt, err)
	}
	return d, nil
}

func decodeQueueIDMark(v []byte) (uint64, error) {
	r := newRecReader(v)
	id := r.uvarint()
	return id, r.err
}

// checkEmptyDef checks a record that carries only its version (vhost,
// binding).
func checkEmptyDef(v []byte) error { return newRecReader(v).err }

func encodePolicyDef(p *Policy) []byte {
	doc, err := json.Marshal(policyDef{Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: p.Priority, Definition: p.Definition})
	if err != nil {
		// A validated policy holds strings and numbers only.
		panic(fmt.Sprintf("encode policy %q: %v", p.Name, err))
	}
	return append([]byte{metaVersion}, doc...)
}

func decodePolicyDef(v []byte) (policyDef, error) {
	var d policyDef
	r := newRecReader(v)
	doc := r.rest()
	if r.err != nil {
		return d, r.err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: policy document: %w", errMetaCorrupt, err)
	}
	return d, nil
}

// maxTags bounds the tag count a decoder accepts, so a corrupt count
// cannot make it allocate without limit.
const maxTags = 1 << 12

func appendStrings(dst []byte, ss []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendBytes(dst, []byte(s))
	}
	return dst
}

func (r *recReader) strings() []string {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxTags || n > uint64(len(r.b)) { // each takes at least a byte
		r.err = fmt.Errorf("%w: %d strings", errMetaCorrupt, n)
		return nil
	}
	var out []string
	for range n {
		out = append(out, string(r.bytes()))
	}
	return out
}

// vhostDef is a vhost's metadata.
type vhostDef struct {
	Description, DefaultQueueType string
	Tags                          []string
}

func encodeVHostDef(d vhostDef) []byte {
	v := []byte{metaVersion}
	if d.Description == "" && d.DefaultQueueType == "" && len(d.Tags) == 0 {
		return v // the layout of a vhost before metadata
	}
	v = appendBytes(v, []byte(d.Description))
	v = appendBytes(v, []byte(d.DefaultQueueType))
	return appendStrings(v, d.Tags)
}

func decodeVHostDef(v []byte) (vhostDef, error) {
	var d vhostDef
	r := newRecReader(v)
	if r.err == nil && len(r.b) > 0 {
		d.Description = string(r.bytes())
		d.DefaultQueueType = string(r.bytes())
		d.Tags = r.strings()
	}
	return d, r.err
}

// userDef is a user's stored record.
type userDef struct {
	Algorithm string
	Hash      []byte // salt ++ digest; empty: no password
	Tags      []string
}

func encodeUserDef(d userDef) []byte {
	v := appendBytes([]byte{metaVersion}, []byte(d.Algorithm))
	v = appendBytes(v, d.Hash)
	return appendStrings(v, d.Tags)
}

func decodeUserDef(v []byte) (userDef, error) {
	r := newRecReader(v)
	d := userDef{Algorithm: string(r.bytes())}
	d.Hash = bytes.Clone(r.bytes())
	d.Tags = r.strings()
	if r.err != nil {
		return d, r.err
	}
	if !auth.KnownAlgorithm(d.Algorithm) {
		return d, fmt.Errorf("%w: unknown password hashing algorithm %q", errMetaCorrupt, d.Algorithm)
	}
	return d, nil
}

// permDef holds the sources of a permission's three patterns.
type permDef struct{ Configure, Write, Read string }

func encodePermDef(d permDef) []byte {
	v := appendBytes([]byte{metaVersion}, []byte(d.Configure))
	v = appendBytes(v, []byte(d.Write))
	return appendBytes(v, []byte(d.Read))
}

func decodePermDef(v []byte) (permDef, error) {
	r := newRecReader(v)
	d := permDef{Configure: string(r.bytes()), Write: string(r.bytes()), Read: string(r.bytes())}
	return d, r.err
}
