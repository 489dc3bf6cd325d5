package broker

// The definition codec moves to broker/defs. Until the old path
// (metacodec.go, metaBatch) is deleted, these tests write every kind of
// record through both and compare the bytes, and read arbitrary records
// through both and compare what comes back (values and error texts), so
// that the move changes no byte of the on-disk format and no recovery.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/store"
)

func sameOp(t *testing.T, what string, old, new store.MetaOp) {
	t.Helper()
	if old.Key != new.Key || !bytes.Equal(old.Value, new.Value) || (old.Value == nil) != (new.Value == nil) {
		t.Fatalf("%s: old path %q = %x, new path %q = %x", what, old.Key, old.Value, new.Key, new.Value)
	}
}

// compatArgs builds an argument table from fuzz input.
func compatArgs(k string, n int64, s string) amqp.Table {
	k, sk := k[:min(len(k), 255)], s[:min(len(s), 255)] // a table's keys are short strings
	switch n % 4 {
	case 0:
		return nil
	case 1:
		return amqp.Table{}
	case 2:
		return amqp.Table{{Key: k, Value: int32(n)}, {Key: "x-s", Value: s}}
	default:
		return amqp.Table{{Key: k, Value: n}, {Key: "t", Value: amqp.Table{{Key: sk, Value: true}}}, {Key: "l", Value: []any{s, int8(3)}}}
	}
}

// encodeBoth writes one record of each kind from the inputs through the
// old path and the new one.
func encodeBoth(t *testing.T, vh, name, s string, id uint64, n int64, flags uint8, marks []byte) {
	t.Helper()
	args := compatArgs(name, n, s)
	var old metaBatch

	// queue
	q := newQueue(nil, store.QueueID(id), name, true, false, flags&1 != 0, args)
	q.vhost = &VHost{Name: vh}
	q.backlogMarked = flags&2 != 0
	if len(marks) > 0 {
		q.markAsked = nil
		for i := 0; i+1 < len(marks); i += 2 {
			q.markAsked = append(q.markAsked, uint64(binary.BigEndian.Uint16(marks[i:])))
		}
	}
	old.putQueue(vh, q)
	sameOp(t, "queue", old.ops[len(old.ops)-1], defs.EncodeQueue(q.def()))
	old.deleteQueue(vh, name)
	sameOp(t, "queue deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.QueueKey(vh, name)})
	old.put(metaKey(metaQueue, vh, name), encodeQueueDef(q))
	sameOp(t, "queue op", old.ops[len(old.ops)-1], defs.EncodeQueue(q.def()))

	// exchange
	x := newExchange(name, s, true, flags&1 != 0, flags&2 != 0, args)
	old.putExchange(vh, x)
	sameOp(t, "exchange", old.ops[len(old.ops)-1], defs.EncodeExchange(x.def(vh)))
	old.deleteExchange(vh, name)
	sameOp(t, "exchange deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.ExchangeKey(vh, name)})

	// bindings, to a queue and to an exchange
	for _, b := range []*Binding{{Source: s, Key: name + s, Args: args, queue: q}, {Source: name, Key: s, Args: args, exchange: x}} {
		old.putBinding(vh, b)
		sameOp(t, "binding", old.ops[len(old.ops)-1], defs.EncodeBinding(b.def(vh)))
		old.deleteBinding(vh, b)
		sameOp(t, "binding deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.BindingKey(b.def(vh))})
	}

	// policies of both kinds
	p := &Policy{Name: name, Pattern: s, ApplyTo: vh, Priority: int(n), Definition: map[string]any{
		"max-length": n, "s": s, "f": float64(flags), "b": flags&1 != 0, "l": []any{s, n}, name: vh}}
	if flags&4 != 0 {
		p.Definition = nil
	}
	for _, k := range []*policyKind{userPolicies, operatorPolicies} {
		old.putPolicy(k.meta, vh, p)
		sameOp(t, k.what, old.ops[len(old.ops)-1], defs.EncodePolicy(policyDefOf(k, vh, p)))
		old.deletePolicy(k.meta, vh, name)
		sameOp(t, k.what+" deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.PolicyKey(k.operator, vh, name)})
	}

	// user, permission, vhost
	tags := []string{s, name}
	if flags&8 != 0 {
		tags = nil
	}
	u := &user{name: name, alg: hashAlgs[int(flags)%len(hashAlgs)], hash: marks, tags: tags}
	old.putUser(u)
	sameOp(t, "user", old.ops[len(old.ops)-1], defs.EncodeUser(userDefOf(u)))
	old.deleteUser(name)
	sameOp(t, "user deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.UserKey(name)})
	pm := &permission{Configure: s, Write: name, Read: vh}
	old.putPerm(vh, name, pm)
	sameOp(t, "permission", old.ops[len(old.ops)-1], defs.EncodePerm(permDefOf(vh, name, pm)))
	old.deletePerm(vh, name)
	sameOp(t, "permission deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.PermKey(vh, name)})
	for _, vd := range []vhostDef{{}, {Description: s}, {DefaultQueueType: name}, {Tags: tags}, {Description: s, DefaultQueueType: name, Tags: tags}} {
		old.putVHost(vh, vd)
		sameOp(t, "vhost", old.ops[len(old.ops)-1], defs.EncodeVHost(defs.VHost{Name: vh, Description: vd.Description, DefaultQueueType: vd.DefaultQueueType, Tags: vd.Tags}))
	}
	old.deleteVHost(vh)
	sameOp(t, "vhost deletion", old.ops[len(old.ops)-1], store.MetaOp{Key: defs.VHostKey(vh)})

	// marks
	old.put(metaQueueIDMark, encodeQueueIDMark(id))
	sameOp(t, "queue id mark", old.ops[len(old.ops)-1], defs.EncodeQueueIDMark(id))
	old.put(metaBootstrapMark, []byte{metaVersion})
	sameOp(t, "bootstrap mark", old.ops[len(old.ops)-1], defs.EncodeBootstrapMark())

	// the vhost's kinds, and keys of any parts
	if fmt.Sprint(vhostMetaKinds) != fmt.Sprint(defs.VHostPrefixes()) {
		t.Fatalf("vhost kinds %q, now %q", vhostMetaKinds, defs.VHostPrefixes())
	}
	if metaKey(metaRedriveFailure, vh, name, s) != defs.Key(defs.PrefixRedriveFailure, vh, name, s) {
		t.Fatal("keys differ")
	}
}

var compatSeeds = []struct {
	vh, name, s string
	id          uint64
	n           int64
	flags       uint8
	marks       []byte
}{
	{"/", "q", "", 1, 0, 0, nil},
	{"", "", "", 1 << 40, 1, 255, []byte{0, 0, 0, 0}},
	{"v\x00h", "n\x00\xff", "s\x01", 1<<64 - 1, 2, 3, []byte{0, 1, 0, 0, 0, 7}},
	{"vh", "orders", "^orders$", 7, 3, 6, []byte{1, 2, 3}},
	{"\xff", "\x00", "\x00\x01", 300, -5, 9, []byte{0, 0}},
}

func TestDefsEncodeAsBefore(t *testing.T) {
	for _, s := range compatSeeds {
		encodeBoth(t, s.vh, s.name, s.s, s.id, s.n, s.flags, s.marks)
	}
}

func FuzzDefsEncodeAsBefore(f *testing.F) {
	for _, s := range compatSeeds {
		f.Add(s.vh, s.name, s.s, s.id, s.n, s.flags, s.marks)
	}
	f.Fuzz(func(t *testing.T, vh, name, s string, id uint64, n int64, flags uint8, marks []byte) {
		encodeBoth(t, vh, name, s, id, n, flags, marks)
	})
}

// decodeBoth reads key and value as each kind through the old path (as
// recoverDefinitions did: metaParts, then the value's decoder) and the
// new one, and compares.
func decodeBoth(t *testing.T, k string, v []byte) {
	t.Helper()
	same := func(what string, oldV any, oldErr error, newV any, newErr error) {
		t.Helper()
		// encoding/json names the document's Go type in some errors.
		oldText, newText := "", ""
		if oldErr != nil && newErr != nil {
			oldText = strings.ReplaceAll(oldErr.Error(), "broker.policyDef", "T")
			newText = strings.ReplaceAll(newErr.Error(), "defs.policyDef", "T")
		}
		if (oldErr == nil) != (newErr == nil) || oldText != newText {
			t.Fatalf("%s %q %x: old error %v, new %v", what, k, v, oldErr, newErr)
		}
		if oldErr == nil && !reflect.DeepEqual(oldV, newV) {
			t.Fatalf("%s %q %x: old %#v, new %#v", what, k, v, oldV, newV)
		}
	}
	oldParts := func(prefix string, n int, dec func(p []string) (any, error)) (any, error) {
		p, err := metaParts(k, prefix, n)
		if err != nil {
			return nil, err
		}
		return dec(p)
	}
	{
		o, oerr := oldParts(metaQueue, 2, func(p []string) (any, error) {
			d, err := decodeQueueDef(v)
			return defs.Queue{VHost: p[0], Name: p[1], ID: d.ID, AutoDelete: d.AutoDelete, Backlog: d.Backlog, Args: d.Args, Marks: d.Marks}, err
		})
		n, nerr := defs.DecodeQueue(k, v)
		same("queue", o, oerr, n, nerr)
	}
	{
		o, oerr := oldParts(metaExchange, 2, func(p []string) (any, error) {
			d, err := decodeExchangeDef(v)
			return defs.Exchange{VHost: p[0], Name: p[1], Type: d.Type, AutoDelete: d.AutoDelete, Internal: d.Internal, Args: d.Args}, err
		})
		n, nerr := defs.DecodeExchange(k, v)
		same("exchange", o, oerr, n, nerr)
	}
	for _, kind := range []*policyKind{userPolicies, operatorPolicies} {
		o, oerr := oldParts(kind.meta, 2, func(p []string) (any, error) {
			d, err := decodePolicyDef(v)
			return defs.Policy{Operator: kind.operator, VHost: p[0], Name: p[1], Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: d.Priority, Definition: d.Definition}, err
		})
		if strings.HasPrefix(k, kind.meta) { // a scan of the kind's prefix gives only its keys
			n, nerr := defs.DecodePolicy(k, v)
			same(kind.what, o, oerr, n, nerr)
		}
	}
	{
		o, oerr := oldParts(metaUser, 1, func(p []string) (any, error) {
			d, err := decodeUserDef(v)
			return defs.User{Name: p[0], Algorithm: d.Algorithm, Hash: d.Hash, Tags: d.Tags}, err
		})
		n, nerr := defs.DecodeUser(k, v)
		if nerr == nil && hashAlgorithm(n.Algorithm) == nil { // the broker's check
			nerr = fmt.Errorf("%w: unknown password hashing algorithm %q", defs.ErrCorrupt, n.Algorithm)
		}
		same("user", o, oerr, n, nerr)
	}
	{
		o, oerr := oldParts(metaPerm, 2, func(p []string) (any, error) {
			d, err := decodePermDef(v)
			return defs.Perm{VHost: p[0], User: p[1], Configure: d.Configure, Write: d.Write, Read: d.Read}, err
		})
		n, nerr := defs.DecodePerm(k, v)
		same("permission", o, oerr, n, nerr)
	}
	{
		o, oerr := oldParts(metaVHost, 1, func(p []string) (any, error) {
			d, err := decodeVHostDef(v)
			return defs.VHost{Name: p[0], Description: d.Description, DefaultQueueType: d.DefaultQueueType, Tags: d.Tags}, err
		})
		n, nerr := defs.DecodeVHost(k, v)
		same("vhost", o, oerr, n, nerr)
	}
	{
		o, oerr := oldParts(metaQueueIDMark, 0, func([]string) (any, error) { return decodeQueueIDMark(v) })
		n, nerr := defs.DecodeQueueIDMark(k, v)
		same("queue id mark", o, oerr, n, nerr)
		o, oerr = oldParts(metaBootstrapMark, 0, func([]string) (any, error) { return nil, checkEmptyDef(v) })
		same("bootstrap mark", o, oerr, nil, defs.DecodeBootstrapMark(k, v))
	}
	{
		// The binding's old path, as recoverDefinitions read it where the
		// vhost and the source exist.
		o, oerr := oldParts(metaBinding, 6, func(p []string) (any, error) {
			if err := checkEmptyDef(v); err != nil {
				return nil, err
			}
			args, err := decodeArgs([]byte(p[5]))
			if err != nil {
				return nil, fmt.Errorf("%w: arguments: %w", errMetaCorrupt, err)
			}
			d := defs.Binding{VHost: p[0], Source: p[1], Dest: p[3], Key: p[4], Args: args}
			switch p[2] {
			case bindToQueue:
			case bindToExchange:
				d.ToExchange = true
			default:
				return nil, fmt.Errorf("%w: binding destination kind %q", errMetaCorrupt, p[2])
			}
			return d, nil
		})
		n, nerr := defs.DecodeBinding(k, v)
		same("binding", o, oerr, n, nerr)
	}
}

func FuzzDefsDecodeAsBefore(f *testing.F) {
	var mb metaBatch
	for _, s := range compatSeeds {
		q := newQueue(nil, store.QueueID(s.id), s.name, true, false, true, compatArgs(s.name, s.n, s.s))
		q.markAsked = []uint64{0, uint64(s.n) & 0xffff, 3}
		mb.putQueue(s.vh, q)
		mb.putExchange(s.vh, newExchange(s.name, s.s, true, true, false, compatArgs(s.s, s.n, s.name)))
		mb.putBinding(s.vh, &Binding{Source: s.s, Key: s.name, Args: compatArgs(s.s, s.n, s.vh), queue: q})
		mb.putBinding(s.vh, &Binding{Source: s.s, Key: s.name, exchange: newExchange(s.name, "direct", true, false, false, nil)})
		pol := &Policy{Name: s.name, Pattern: s.s, ApplyTo: "queues", Priority: int(s.n), Definition: map[string]any{"max-length": s.n}}
		mb.putPolicy(metaPolicy, s.vh, pol)
		mb.putPolicy(metaOperatorPolicy, s.vh, pol)
		mb.putUser(&user{name: s.name, alg: hashAlgs[int(s.flags)%len(hashAlgs)], hash: s.marks, tags: []string{s.s}})
		mb.putPerm(s.vh, s.name, &permission{Configure: s.s, Write: s.vh, Read: s.name})
		mb.putVHost(s.vh, vhostDef{})
		mb.putVHost(s.vh, vhostDef{Description: s.s, Tags: []string{s.name}})
		mb.put(metaQueueIDMark, encodeQueueIDMark(s.id))
		mb.put(metaBootstrapMark, []byte{metaVersion})
	}
	for i, op := range mb.ops {
		f.Add(op.Key, op.Value)
		f.Add(op.Key, op.Value[:len(op.Value)/2])
		f.Add(op.Key+"\x00", append(op.Value, byte(i)))
		f.Add(mb.ops[(i+3)%len(mb.ops)].Key, op.Value)
	}
	f.Add("b/"+string([]byte{'/', 0, 1, 's', 0, 1, 'z', 0, 1, 'd', 0, 1, 0, 1, 0, 1}), []byte{1})
	f.Add("q/", []byte{})
	f.Fuzz(func(t *testing.T, k string, v []byte) {
		decodeBoth(t, k, v)
	})
}
