package amqp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// Each fuzz target asserts: no panic, only typed errors, and for inputs that
// decode, that re-encoding gives bytes which decode to the same encoding again
// — and, where the format allows it, the very input bytes.

func FuzzDecodeTable(f *testing.F) {
	for _, tab := range []Table{everyType, nil, {{"x-match", "all"}, {"format", "pdf"}}, {{"x-max-length", int32(10)}, {"x-queue-type", "quorum"}}} {
		enc, _ := AppendTable(nil, tab)
		f.Add(enc)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		enc, _ := AppendTable(nil, randTable(r, 3))
		f.Add(enc)
	}
	f.Add([]byte("\x00\x00\x00\x20\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x05guest"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		tab, n, err := DecodeTable(in)
		if err != nil {
			wantError(t, err, FrameError)
		} else {
			if n < 4 || n > len(data) {
				t.Fatalf("consumed %d of %d bytes", n, len(data))
			}
			checkTableReencodes(t, tab, data[4:n])
			// Decoded values must not change when the input buffer is reused.
			want, _ := AppendTableBody(nil, tab)
			for i := range in {
				in[i] = ^in[i]
			}
			if got, _ := AppendTableBody(nil, tab); !bytes.Equal(got, want) {
				t.Fatal("decoded table aliases its input")
			}
		}
		body, err := DecodeTableBody(data)
		if err != nil {
			wantError(t, err, FrameError)
			return
		}
		checkTableReencodes(t, body, data)
	})
}

// checkTableReencodes checks that tab, decoded from the table body raw,
// encodes back to raw (up to bool octets) and that its encoding is stable.
func checkTableReencodes(t *testing.T, tab Table, raw []byte) {
	t.Helper()
	enc, err := AppendTableBody(nil, tab)
	if err != nil {
		t.Fatalf("decoded table does not encode: %v", err)
	}
	if len(enc) != len(raw) || (!tableHasBool(tab) && !bytes.Equal(enc, raw)) {
		t.Fatalf("re-encoding %x gave %x", raw, enc)
	}
	tab2, err := DecodeTableBody(enc)
	if err != nil {
		t.Fatalf("re-encoded table does not decode: %v", err)
	}
	enc2, _ := AppendTableBody(nil, tab2)
	if !bytes.Equal(enc2, enc) {
		t.Fatalf("encoding not stable: %x then %x", enc, enc2)
	}
}

func FuzzDecodeProperties(f *testing.F) {
	full := fullProperties()
	for _, flags := range []uint16{0, allFlags, FlagDeliveryMode, FlagContentType | FlagHeaders | FlagDeliveryMode, FlagExpiration | FlagTimestamp} {
		p := full
		p.Flags = flags
		raw, _ := p.Append(nil)
		f.Add(raw)
	}
	f.Add([]byte{0x00, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		p, err := DecodeProperties(in)
		if err != nil {
			wantError(t, err, FrameError)
			return
		}
		enc, err := p.Append(nil)
		if err != nil {
			t.Fatalf("decoded properties do not encode: %v", err)
		}
		if len(enc) != len(data) || (!tableHasBool(p.Headers) && !bytes.Equal(enc, data)) {
			t.Fatalf("Append(DecodeProperties(%x)) = %x", data, enc)
		}
		for i := range in {
			in[i] = ^in[i]
		}
		if again, _ := p.Append(nil); !bytes.Equal(again, enc) {
			t.Fatal("decoded properties alias their input")
		}
		p2, err := DecodeProperties(enc)
		if err != nil {
			t.Fatalf("re-encoded properties do not decode: %v", err)
		}
		if enc2, _ := p2.Append(nil); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding not stable: %x then %x", enc, enc2)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	var stream []byte
	stream = AppendMethodFrame(stream, 1, &BasicPublish{Exchange: "amq.direct", RoutingKey: "k"})
	props := fullProperties()
	raw, _ := props.Append(nil)
	stream = AppendHeaderFrame(stream, 1, ClassBasic, 300, raw)
	stream = AppendBodyFrames(stream, 1, make([]byte, 300), 4096)
	stream = AppendHeartbeat(stream)
	f.Add(stream, uint32(0))
	f.Add(stream, uint32(4096))
	f.Add(stream, uint32(40))
	f.Add(AppendBodyFrames(nil, 3, make([]byte, 40_000), 0), uint32(0))
	f.Add(AppendMethodFrame(nil, 0, &ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60}), uint32(InitialFrameMax))
	f.Add([]byte("AMQP\x00\x00\x09\x01"), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, max uint32) {
		fr := NewFrameReader(bytes.NewReader(data))
		fr.SetMaxFrameSize(max)
		off := 0
		for {
			fr0, err := fr.ReadFrame()
			if err != nil {
				var e *Error
				switch {
				case errors.As(err, &e):
					if e.Code != FrameError {
						t.Fatalf("frame error with code %d", e.Code)
					}
				case errors.Is(err, io.EOF):
					if off != len(data) {
						t.Fatalf("io.EOF at %d of %d bytes", off, len(data))
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
				default:
					t.Fatalf("untyped error %v", err)
				}
				return
			}
			size := frameOverhead + len(fr0.Payload)
			if max != 0 && size > int(max) {
				t.Fatalf("frame of %d bytes accepted with maximum %d", size, max)
			}
			if enc := AppendFrame(nil, fr0); !bytes.Equal(enc, data[off:off+size]) {
				t.Fatalf("frame at %d re-encodes as %x, was %x", off, enc, data[off:off+size])
			}
			off += size
		}
	})
}

func FuzzDecodeMethod(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, m := range allMethods() {
		f.Add(AppendMethodFrame(nil, 0, m)[7:])
		fillRandom(r, m)
		p := AppendMethodFrame(nil, 0, m)
		f.Add(p[7 : len(p)-1])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		in := bytes.Clone(payload)
		m, err := DecodeMethod(in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != FrameError && e.Code != CommandInvalid) {
				t.Fatalf("error %v is not a FRAME_ERROR or COMMAND_INVALID *Error", err)
			}
			return
		}
		enc := methodPayload(m)
		if len(enc) > len(payload) {
			t.Fatalf("%s re-encodes to %d bytes from %d", m.Name(), len(enc), len(payload))
		}
		for i := range in {
			in[i] = ^in[i]
		}
		if again := methodPayload(m); !bytes.Equal(again, enc) {
			t.Fatalf("decoded %s aliases its input", m.Name())
		}
		m2, err := DecodeMethod(enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", m.Name(), err)
		}
		if enc2 := methodPayload(m2); !bytes.Equal(enc2, enc) {
			t.Fatalf("%s encoding not stable: %x then %x", m.Name(), enc, enc2)
		}
	})
}

func methodPayload(m Method) []byte {
	b := binary.BigEndian.AppendUint16(nil, m.ClassID())
	b = binary.BigEndian.AppendUint16(b, m.MethodID())
	return m.AppendArgs(b)
}
