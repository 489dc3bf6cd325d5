package defs

// Goldens: the bytes of one record of each kind, as brokerd wrote them
// before this package existed (taken from broker/metacodec.go's encoders,
// whose output the package was checked against byte for byte before they
// were deleted). A change here is a change of the on-disk format: existing
// data directories would no longer recover. Do not edit a golden to make a
// test pass.

import (
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// golden is one record: the value, its encoding and decoding, and the
// bytes they must give and take.
type golden struct {
	name   string
	op     store.MetaOp                            // the value, encoded
	decode func(key string, v []byte) (any, error) // back to the value
	want   any                                     // what decode must return
	key    string
	value  string // hex
}

func goldens() []golden {
	vh := func(k string, v []byte) (any, error) { return DecodeVHost(k, v) }
	us := func(k string, v []byte) (any, error) { return DecodeUser(k, v) }
	pm := func(k string, v []byte) (any, error) { return DecodePerm(k, v) }
	ex := func(k string, v []byte) (any, error) { return DecodeExchange(k, v) }
	qu := func(k string, v []byte) (any, error) { return DecodeQueue(k, v) }
	bi := func(k string, v []byte) (any, error) { return DecodeBinding(k, v) }
	po := func(k string, v []byte) (any, error) { return DecodePolicy(k, v) }
	st := func(k string, v []byte) (any, error) { return DecodeQueueState(k, v) }

	prod := VHost{Name: "prod", Description: "Production", DefaultQueueType: "quorum", Tags: []string{"a", "b"}}
	guest := User{Name: "guest", Algorithm: "rabbit_password_hashing_sha256", Hash: []byte{1, 2, 3, 4, 0xaa, 0xbb}, Tags: []string{"administrator"}}
	nopw := User{Name: "nopw", Algorithm: "rabbit_password_hashing_md5"}
	perm := Perm{VHost: "/", User: "guest", Configure: ".*", Write: "^a"}
	orders := Exchange{VHost: "/", Name: "orders", Type: "topic", AutoDelete: true, Internal: true, Args: amqp.Table{{Key: "alternate-exchange", Value: "ae"}}}
	plainX := Exchange{VHost: "v\x00", Name: "x", Type: "direct"}
	q := Queue{VHost: "/", Name: "q\x00\xff", ID: 1 << 33, AutoDelete: true, Backlog: true, Args: amqp.Table{{Key: "x-max-length", Value: int32(3)}}, Marks: []uint64{0, 5, 1 << 20}}
	plainQ := Queue{VHost: "/", Name: "plain", ID: 7, Marks: []uint64{0, 0}}
	toQ := Binding{VHost: "/", Source: "amq.direct", Dest: "q", Key: "k\x00"}
	toX := Binding{VHost: "/", Source: "src", Dest: "dst", ToExchange: true, Key: "#", Args: amqp.Table{{Key: "x-match", Value: "all"}}}
	pol := Policy{VHost: "/", Name: "p", Pattern: "^q", ApplyTo: "queues", Priority: 4, Definition: map[string]any{"max-length": 10, "overflow": "reject-publish"}}
	op := Policy{Operator: true, VHost: "vh", Name: "op", ApplyTo: "all", Definition: map[string]any{"max-length-bytes": json.Number("1048576")}}

	// What decoding gives back where it differs from the value encoded:
	// no all-zero marks, an empty hash, numbers as json.Number.
	nopwBack := nopw
	nopwBack.Hash = []byte{}
	plainQBack := plainQ
	plainQBack.Marks = nil
	qs := QueueState{ID: 1 << 33, Backlog: true, Marks: []uint64{0, 5, 1 << 20}}
	plainQS := QueueState{ID: 7, Marks: []uint64{0, 0}}
	plainQSBack := plainQS
	plainQSBack.Marks = nil
	polBack := pol
	polBack.Definition = map[string]any{"max-length": json.Number("10"), "overflow": "reject-publish"}

	return []golden{
		{"vhost without metadata", EncodeVHost(VHost{Name: "/"}), vh, VHost{Name: "/"},
			"v//\x00\x01", "01"},
		{"vhost", EncodeVHost(prod), vh, prod,
			"v/prod\x00\x01", "010a50726f64756374696f6e0671756f72756d0201610162"},
		{"user", EncodeUser(guest), us, guest,
			"u/guest\x00\x01", "011e7261626269745f70617373776f72645f68617368696e675f7368613235360601020304aabb010d61646d696e6973747261746f72"},
		{"user without password", EncodeUser(nopw), us, nopwBack,
			"u/nopw\x00\x01", "011b7261626269745f70617373776f72645f68617368696e675f6d64350000"},
		{"permission", EncodePerm(perm), pm, perm,
			"a//\x00\x01guest\x00\x01", "01022e2a025e6100"},
		{"exchange", EncodeExchange(orders), ex, orders,
			"x//\x00\x01orders\x00\x01", "0105746f706963031e0000001a12616c7465726e6174652d65786368616e676553000000026165"},
		{"exchange without arguments", EncodeExchange(plainX), ex, plainX,
			"x/v\x00\xff\x00\x01x\x00\x01", "0106646972656374000400000000"},
		{"queue", EncodeQueue(q), qu, q,
			"q//\x00\x01q\x00\xff\xff\x00\x01", "0180808080200316000000120c782d6d61782d6c656e6774684900000003030005808040"},
		{"queue without marks", EncodeQueue(plainQ), qu, plainQBack,
			"q//\x00\x01plain\x00\x01", "0107000400000000"},
		{"queue state", EncodeQueueState(qs), st, qs,
			"s/0000000200000000\x00\x01", "0102030005808040"},
		{"queue state without marks", EncodeQueueState(plainQS), st, plainQSBack,
			"s/0000000000000007\x00\x01", "0100"},
		{"binding to a queue", EncodeBinding(toQ), bi, toQ,
			"b//\x00\x01amq.direct\x00\x01q\x00\x01q\x00\x01k\x00\xff\x00\x01\x00\xff\x00\xff\x00\xff\x00\xff\x00\x01", "01"},
		{"binding to an exchange", EncodeBinding(toX), bi, toX,
			"b//\x00\x01src\x00\x01x\x00\x01dst\x00\x01#\x00\x01\x00\xff\x00\xff\x00\xff\x10\ax-matchS\x00\xff\x00\xff\x00\xff\x03all\x00\x01", "01"},
		{"policy", EncodePolicy(pol), po, polBack,
			"p//\x00\x01p\x00\x01", "017b227061747465726e223a225e71222c226170706c792d746f223a22717565756573222c227072696f72697479223a342c22646566696e6974696f6e223a7b226d61782d6c656e677468223a31302c226f766572666c6f77223a2272656a6563742d7075626c697368227d7d"},
		{"operator policy", EncodePolicy(op), po, op,
			"o/vh\x00\x01op\x00\x01", "017b227061747465726e223a22222c226170706c792d746f223a22616c6c222c227072696f72697479223a302c22646566696e6974696f6e223a7b226d61782d6c656e6774682d6279746573223a313034383537367d7d"},
		{"queue id mark", EncodeQueueIDMark(300), func(k string, v []byte) (any, error) { return DecodeQueueIDMark(k, v) }, uint64(300),
			"n/queue-id", "01ac02"},
		{"parameter", EncodeParameter(Parameter{VHost: "/", Component: "shovel", Name: "s", Value: json.RawMessage(`{"src-queue": "a"}`)}),
			func(k string, v []byte) (any, error) { return DecodeParameter(k, v) },
			Parameter{VHost: "/", Component: "shovel", Name: "s", Value: json.RawMessage(`{"src-queue":"a"}`)},
			"r//\x00\x01shovel\x00\x01s\x00\x01", "017b227372632d7175657565223a2261227d"},
		{"global parameter", EncodeGlobalParameter(GlobalParameter{Name: "cluster_name", Value: json.RawMessage(`"c1"`)}),
			func(k string, v []byte) (any, error) { return DecodeGlobalParameter(k, v) },
			GlobalParameter{Name: "cluster_name", Value: json.RawMessage(`"c1"`)},
			"g/cluster_name\x00\x01", "0122633122"},
		{"bootstrap mark", EncodeBootstrapMark(), func(k string, v []byte) (any, error) { return nil, DecodeBootstrapMark(k, v) }, nil,
			"n/bootstrapped", "01"},
	}
}

func TestGoldens(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.name, func(t *testing.T) {
			if g.op.Key != g.key {
				t.Errorf("key %q, want %q", g.op.Key, g.key)
			}
			if got := hex.EncodeToString(g.op.Value); got != g.value {
				t.Errorf("value %s, want %s", got, g.value)
			}
			v, err := hex.DecodeString(g.value)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.decode(g.key, v)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !equalValues(got, g.want) {
				t.Fatalf("decoded %#v, want %#v", got, g.want)
			}
		})
	}
}
