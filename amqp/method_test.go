package amqp

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestAllMethodsMetadata(t *testing.T) {
	ms := allMethods()
	if len(ms) != 66 {
		t.Fatalf("%d methods, the 0-9-1 spec with RabbitMQ's extensions has 66", len(ms))
	}
	content := map[string]bool{"basic.publish": true, "basic.return": true, "basic.deliver": true, "basic.get-ok": true}
	for _, m := range ms {
		name := m.Name()
		if MethodName(m.ClassID(), m.MethodID()) != name {
			t.Errorf("MethodName(%d, %d) = %q, want %q", m.ClassID(), m.MethodID(), MethodName(m.ClassID(), m.MethodID()), name)
		}
		if m.HasContent() != content[name] {
			t.Errorf("%s: HasContent = %v", name, m.HasContent())
		}
		// The Go type name is the CamelCase of the protocol name.
		typ := reflect.TypeOf(m).Elem().Name()
		var want strings.Builder
		for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '.' || r == '-' }) {
			want.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
		if typ != want.String() {
			t.Errorf("%s is Go type %s, want %s", name, typ, want.String())
		}
	}
	if MethodName(60, 999) != "" || MethodName(0, 0) != "" {
		t.Error("MethodName of unknown ids should be empty")
	}
	for _, c := range []struct {
		m    Method
		sync bool
	}{
		{&QueueDeclare{}, true}, {&QueueDeclareOk{}, false}, {&BasicPublish{}, false},
		{&BasicAck{}, false}, {&BasicConsume{}, true}, {&ConfirmSelect{}, true}, {&ConnectionClose{}, true},
	} {
		if c.m.Synchronous() != c.sync {
			t.Errorf("%s: Synchronous = %v", c.m.Name(), c.m.Synchronous())
		}
	}
}

// TestMethodRoundTrip encodes every method with random arguments as a frame,
// reads the frame back and decodes it.
func TestMethodRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, proto := range allMethods() {
		for i := 0; i < 50; i++ {
			m := reflect.New(reflect.TypeOf(proto).Elem()).Interface().(Method)
			if i > 0 { // the first pass checks the zero value
				fillRandom(r, m)
			}
			frame := AppendMethodFrame([]byte("x"), 42, m)[1:]
			fr := NewFrameReader(bytes.NewReader(frame))
			fr.SetMaxFrameSize(0)
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: read frame: %v", m.Name(), err)
			}
			if f.Type != FrameMethod || f.Channel != 42 {
				t.Fatalf("%s: frame type %d channel %d", m.Name(), f.Type, f.Channel)
			}
			got, err := DecodeMethod(f.Payload)
			if err != nil {
				t.Fatalf("%s: %v", m.Name(), err)
			}
			// Encodings, not values, are compared: random tables hold NaNs.
			if !bytes.Equal(got.AppendArgs(nil), m.AppendArgs(nil)) {
				t.Fatalf("%s: round trip changed\n%#v\nto\n%#v", m.Name(), m, got)
			}
			if reflect.TypeOf(got) != reflect.TypeOf(m) {
				t.Fatalf("%s decoded as %T", m.Name(), got)
			}
		}
	}
}

// TestMethodFieldsIndependent sets one field at a time: a round trip alone
// would not notice two bits swapped in both encoder and decoder, but it
// would notice a field bleeding into another.
func TestMethodFieldsIndependent(t *testing.T) {
	for _, proto := range allMethods() {
		typ := reflect.TypeOf(proto).Elem()
		for i := 0; i < typ.NumField(); i++ {
			m := reflect.New(typ)
			f := m.Elem().Field(i)
			switch f.Kind() {
			case reflect.Bool:
				f.SetBool(true)
			case reflect.String:
				f.SetString("s")
			case reflect.Slice:
				f.Set(reflect.ValueOf(Table{{"k", nil}}))
			default:
				f.SetUint(1)
			}
			payload := AppendMethodFrame(nil, 0, m.Interface().(Method))[7:]
			got, err := DecodeMethod(payload[:len(payload)-1])
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m.Interface()) {
				t.Errorf("%s field %s: decoded %+v", typ.Name(), typ.Field(i).Name, got)
			}
		}
	}
}

// TestMethodWireFormat pins complete frames to bytes written from the spec.
func TestMethodWireFormat(t *testing.T) {
	cases := []struct {
		ch   uint16
		m    Method
		want string
	}{
		{1, &BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true},
			"\x01\x00\x01\x00\x00\x00\x0d" + "\x00\x3c\x00\x28" + "\x00\x00\x02ex\x02rk\x01" + "\xce"},
		{1, &BasicPublish{Immediate: true},
			"\x01\x00\x01\x00\x00\x00\x09" + "\x00\x3c\x00\x28" + "\x00\x00\x00\x00\x02" + "\xce"},
		{2, &BasicAck{DeliveryTag: 0x0102030405060708, Multiple: true},
			"\x01\x00\x02\x00\x00\x00\x0d" + "\x00\x3c\x00\x50" + "\x01\x02\x03\x04\x05\x06\x07\x08\x01" + "\xce"},
		{2, &BasicNack{DeliveryTag: 1, Requeue: true},
			"\x01\x00\x02\x00\x00\x00\x0d" + "\x00\x3c\x00\x78" + "\x00\x00\x00\x00\x00\x00\x00\x01\x02" + "\xce"},
		{0, &ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60},
			"\x01\x00\x00\x00\x00\x00\x0c" + "\x00\x0a\x00\x1e" + "\x07\xff\x00\x02\x00\x00\x00\x3c" + "\xce"},
		// passive bit 0, durable 1, exclusive 2, auto-delete 3, nowait 4.
		{3, &QueueDeclare{Queue: "q", Durable: true, AutoDelete: true, Arguments: Table{{"x-max-length", int32(10)}}},
			"\x01\x00\x03\x00\x00\x00\x1f" + "\x00\x32\x00\x0a" + "\x00\x00\x01q\x0a" +
				"\x00\x00\x00\x12\x0cx-max-lengthI\x00\x00\x00\x0a" + "\xce"},
		{0, &ConnectionClose{ReplyCode: 404, ReplyText: "NOT_FOUND", FailingClassID: 50, FailingMethodID: 10},
			"\x01\x00\x00\x00\x00\x00\x14" + "\x00\x0a\x00\x32" + "\x01\x94\x09NOT_FOUND\x00\x32\x00\x0a" + "\xce"},
		{5, &TxCommitOk{}, "\x01\x00\x05\x00\x00\x00\x04" + "\x00\x5a\x00\x15" + "\xce"},
		{0, &ExchangeUnbindOk{}, "\x01\x00\x00\x00\x00\x00\x04" + "\x00\x28\x00\x33" + "\xce"},
	}
	for _, c := range cases {
		got := AppendMethodFrame(nil, c.ch, c.m)
		if string(got) != c.want {
			t.Errorf("%s:\n got %x\nwant %x", c.m.Name(), got, c.want)
		}
	}
}

func TestDecodeMethodErrors(t *testing.T) {
	_, err := DecodeMethod([]byte{0, 60, 3, 0xe7})
	e := wantError(t, err, CommandInvalid)
	if e.Text != "COMMAND_INVALID - unknown method class 60 method 999" || e.ClassID != 60 || e.MethodID != 999 {
		t.Errorf("unknown method: %+v", e)
	}
	_, err = DecodeMethod([]byte{0, 99, 0, 10})
	wantError(t, err, CommandInvalid)
	_, err = DecodeMethod([]byte{0, 60})
	wantError(t, err, FrameError)

	payload := AppendMethodFrame(nil, 1, &BasicPublish{Exchange: "ex", RoutingKey: "rk"})
	payload = payload[7 : len(payload)-1]
	for i := 4; i < len(payload); i++ {
		_, err := DecodeMethod(payload[:i])
		e := wantError(t, err, FrameError)
		if !strings.HasPrefix(e.Text, "FRAME_ERROR - cannot decode basic.publish: ") || e.ClassID != 60 || e.MethodID != 40 {
			t.Errorf("truncated to %d: %+v", i, e)
		}
	}

	// A shortstr whose length runs past the end.
	_, err = DecodeMethod([]byte{0, 60, 0, 40, 0, 0, 200, 'e'})
	e = wantError(t, err, FrameError)
	if !strings.Contains(e.Text, "field exchange") {
		t.Errorf("text does not name the field: %q", e.Text)
	}

	// A bad table argument.
	bad := []byte{0, 50, 0, 10, 0, 0, 1, 'q', 0, 0, 0, 0, 3, 1, 'k', 'Z'}
	_, err = DecodeMethod(bad)
	e = wantError(t, err, FrameError)
	if !strings.HasPrefix(e.Text, "FRAME_ERROR - cannot decode queue.declare: field arguments: ") {
		t.Errorf("bad table: %q", e.Text)
	}

	// Trailing bytes after the arguments are ignored, as RabbitMQ does.
	m, err := DecodeMethod(append(bytes.Clone(payload), 1, 2, 3))
	if err != nil {
		t.Fatalf("trailing bytes: %v", err)
	}
	if p := m.(*BasicPublish); p.Exchange != "ex" || p.RoutingKey != "rk" {
		t.Fatalf("trailing bytes: decoded %+v", p)
	}
}

func TestDecodeMethodNoAliasing(t *testing.T) {
	want := &QueueBind{Queue: "queue", Exchange: "exchange", RoutingKey: "key", Arguments: Table{{"x-match", "all"}, {"bin", []byte("abc")}}}
	payload := AppendMethodFrame(nil, 1, want)[7:]
	m, err := DecodeMethod(payload)
	if err != nil {
		t.Fatal(err)
	}
	for i := range payload {
		payload[i] = 'Z'
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded method changed with its input: %+v", m)
	}
}

func TestShortstrTruncation(t *testing.T) {
	cases := []struct{ in, want string }{
		{strings.Repeat("x", 255), strings.Repeat("x", 255)},
		{strings.Repeat("x", 300), strings.Repeat("x", 255)},
		{strings.Repeat("é", 200), strings.Repeat("é", 127)},            // 2-byte runes: cut at 254
		{"a" + strings.Repeat("€", 100), "a" + strings.Repeat("€", 84)}, // 3-byte runes: cut at 253
		{"\xff" + strings.Repeat("é", 200), ("\xff" + strings.Repeat("é", 200))[:255]},
	}
	for _, c := range cases {
		payload := AppendMethodFrame(nil, 0, &ConnectionClose{ReplyText: c.in})[7:]
		m, err := DecodeMethod(payload)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.(*ConnectionClose).ReplyText; got != c.want {
			t.Errorf("%d-byte text truncated to %d bytes, want %d", len(c.in), len(got), len(c.want))
		}
	}
}

func TestAppendArgsPanicsOnBadTable(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "queue.declare arguments") {
			t.Fatalf("recovered %v", r)
		}
	}()
	AppendMethodFrame(nil, 1, &QueueDeclare{Arguments: Table{{"x-bad", uint64(1)}}})
}

func TestMethodAllocations(t *testing.T) {
	ack := AppendMethodFrame(nil, 1, &BasicAck{DeliveryTag: 99})[7:]
	if n := testing.AllocsPerRun(100, func() { DecodeMethod(ack) }); n > 1 {
		t.Errorf("decode basic.ack: %.0f allocations, want 1 (the struct)", n)
	}
	pub := AppendMethodFrame(nil, 1, &BasicPublish{Exchange: "amq.topic", RoutingKey: "a.b.c"})[7:]
	if n := testing.AllocsPerRun(100, func() { DecodeMethod(pub) }); n > 3 {
		t.Errorf("decode basic.publish: %.0f allocations, want 3 (struct, two strings)", n)
	}
	buf := make([]byte, 0, 4096)
	deliver := &BasicDeliver{ConsumerTag: "ctag", DeliveryTag: 1, Exchange: "ex", RoutingKey: "rk"}
	if n := testing.AllocsPerRun(100, func() { buf = AppendMethodFrame(buf[:0], 1, deliver) }); n != 0 {
		t.Errorf("encode basic.deliver into a buffer: %.0f allocations, want 0", n)
	}
}
