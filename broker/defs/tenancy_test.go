package defs

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

// Limits and topic permissions: each record round-trips, its bytes are
// pinned (the on-disk format), and a damaged one is ErrCorrupt.
func TestTenancyRecords(t *testing.T) {
	vl := Limits{Owner: "v\x00", Limits: map[string]int64{"max-queues": 7, "max-connections": -1}}
	op := EncodeVHostLimits(vl)
	if got, err := DecodeVHostLimits(op.Key, op.Value); err != nil || !reflect.DeepEqual(got, vl) {
		t.Fatalf("vhost limits: %#v, %v", got, err)
	}
	// Sorted by name; -1 is zigzag 0x01, 7 is 0x0e.
	if want := "0102" + "0f" + hex.EncodeToString([]byte("max-connections")) + "01" + "0a" + hex.EncodeToString([]byte("max-queues")) + "0e"; hex.EncodeToString(op.Value) != want {
		t.Fatalf("vhost limits bytes %x, want %s", op.Value, want)
	}
	if op.Key != "vl/v\x00\xff\x00\x01" {
		t.Fatalf("vhost limits key %q", op.Key)
	}
	ul := Limits{Owner: "u", Limits: map[string]int64{"max-channels": 1 << 40}}
	op = EncodeUserLimits(ul)
	if got, err := DecodeUserLimits(op.Key, op.Value); err != nil || !reflect.DeepEqual(got, ul) {
		t.Fatalf("user limits: %#v, %v", got, err)
	}
	if _, err := DecodeVHostLimits(op.Key, op.Value); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a user's limits decoded as a vhost's: %v", err)
	}
	tp := TopicPerm{VHost: "/", User: "u", Exchange: "amq.topic", Write: "^{username}\\.", Read: ""}
	op = EncodeTopicPerm(tp)
	if got, err := DecodeTopicPerm(op.Key, op.Value); err != nil || got != tp {
		t.Fatalf("topic permission: %#v, %v", got, err)
	}
	if want := "01" + "0d" + hex.EncodeToString([]byte("^{username}\\.")) + "00"; hex.EncodeToString(op.Value) != want {
		t.Fatalf("topic permission bytes %x, want %s", op.Value, want)
	}
	for _, bad := range [][]byte{nil, {Version}, {Version, 0x05}, {Version, 0x01, 0x01, 'm'}, {Version, 0x01, 0x01, 'm', 0x80}, {Version + 1, 0}} {
		if _, err := DecodeUserLimits(UserLimitsKey("u"), bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("limits %x: %v, want ErrCorrupt", bad, err)
		}
	}
	if _, err := DecodeTopicPerm(TopicPermKey("/", "u", "x"), []byte{Version, 3, 'a'}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short topic permission: %v", err)
	}
}

// The decoders of limits and topic permissions, given any value, return
// an error wrapping ErrCorrupt or a value whose record decodes to it
// again.
func FuzzTenancyDecode(f *testing.F) {
	f.Add(EncodeVHostLimits(Limits{Owner: "v", Limits: map[string]int64{"max-queues": 7}}).Value)
	f.Add(EncodeTopicPerm(TopicPerm{Write: "^a", Read: ""}).Value)
	f.Add([]byte{Version, 2, 1, 'a', 1, 1, 'a', 2})
	f.Fuzz(func(t *testing.T, v []byte) {
		if d, err := DecodeVHostLimits(VHostLimitsKey("v"), v); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("limits %x: %v does not wrap ErrCorrupt", v, err)
			}
		} else {
			op := EncodeVHostLimits(d)
			if again, err := DecodeVHostLimits(op.Key, op.Value); err != nil || !reflect.DeepEqual(again, d) {
				t.Fatalf("limits %x decode to %v, whose record decodes to %v, %v", v, d, again, err)
			}
		}
		if d, err := DecodeTopicPerm(TopicPermKey("v", "u", "x"), v); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("topic permission %x: %v does not wrap ErrCorrupt", v, err)
			}
		} else {
			op := EncodeTopicPerm(d)
			if again, err := DecodeTopicPerm(op.Key, op.Value); err != nil || again != d {
				t.Fatalf("topic permission %x decodes to %v, whose record decodes to %v, %v", v, d, again, err)
			}
		}
	})
}
