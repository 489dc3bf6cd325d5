package amqp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func sampleFrames() []Frame {
	return []Frame{
		{Type: FrameMethod, Channel: 0, Payload: []byte{0, 10, 0, 11}},
		{Type: FrameHeader, Channel: 1, Payload: bytes.Repeat([]byte{2}, 100)},
		{Type: FrameBody, Channel: 65535, Payload: bytes.Repeat([]byte{3}, 5000)},
		{Type: FrameBody, Channel: 2, Payload: nil},
		{Type: FrameHeartbeat, Channel: 0, Payload: nil},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		stream = AppendFrame(stream, f)
	}
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"data+EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) },
	}
	for name, mk := range readers {
		fr := NewFrameReader(mk())
		for i, want := range sampleFrames() {
			got, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: frame %d: %v", name, i, err)
			}
			if got.Type != want.Type || got.Channel != want.Channel || !bytes.Equal(got.Payload, want.Payload) {
				t.Fatalf("%s: frame %d: got type %d channel %d %d bytes", name, i, got.Type, got.Channel, len(got.Payload))
			}
			if cap(got.Payload) != len(got.Payload) {
				t.Fatalf("%s: payload capacity %d exceeds its length %d: appending would overwrite the next frame", name, cap(got.Payload), len(got.Payload))
			}
		}
		if _, err := fr.ReadFrame(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last frame got %v, want io.EOF", name, err)
		}
	}
}

func TestFrameLargerThanReadBuffer(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB, well over readBufferSize
	for i := range big {
		big[i] ^= byte(i >> 8)
	}
	var stream []byte
	stream = AppendFrame(stream, Frame{Type: FrameBody, Channel: 1, Payload: big})
	stream = AppendFrame(stream, Frame{Type: FrameBody, Channel: 1, Payload: []byte("small")})
	stream = AppendFrame(stream, Frame{Type: FrameBody, Channel: 1, Payload: big[:200_000]})
	fr := NewFrameReader(iotest.HalfReader(bytes.NewReader(stream)))
	fr.SetMaxFrameSize(0)
	for i, want := range [][]byte{big, []byte("small"), big[:200_000]} {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(f.Payload, want) {
			t.Fatalf("frame %d: payload differs", i)
		}
	}
}

func TestFrameMaxSize(t *testing.T) {
	frame := func(payload int) []byte {
		return AppendFrame(nil, Frame{Type: FrameBody, Channel: 1, Payload: make([]byte, payload)})
	}
	fr := NewFrameReader(bytes.NewReader(frame(131072 - 8)))
	fr.SetMaxFrameSize(131072)
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatalf("frame of exactly the maximum: %v", err)
	}

	fr = NewFrameReader(bytes.NewReader(frame(200000 - 8)))
	fr.SetMaxFrameSize(131072)
	_, err := fr.ReadFrame()
	e := wantError(t, err, FrameError)
	if want := "FRAME_ERROR - frame size 200000 exceeds negotiated maximum 131072"; e.Text != want {
		t.Fatalf("text %q, want %q", e.Text, want)
	}

	// Until the broker sets a limit, the handshake limit applies.
	fr = NewFrameReader(bytes.NewReader(frame(InitialFrameMax - 8 + 1)))
	_, err = fr.ReadFrame()
	wantError(t, err, FrameError)
	fr = NewFrameReader(bytes.NewReader(frame(InitialFrameMax - 8)))
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatalf("frame of InitialFrameMax: %v", err)
	}
}

func TestFrameErrors(t *testing.T) {
	good := AppendFrame(nil, Frame{Type: FrameMethod, Channel: 1, Payload: []byte("abcd")})
	bigGood := AppendFrame(nil, Frame{Type: FrameBody, Channel: 1, Payload: make([]byte, 100_000)})
	badEnd := func(f []byte) []byte {
		f = bytes.Clone(f)
		f[len(f)-1] = 'X'
		return f
	}
	badType := bytes.Clone(good)
	badType[0] = 9

	for name, in := range map[string][]byte{
		"missing frame end":            badEnd(good),
		"missing frame end, big":       badEnd(bigGood),
		"unknown frame type":           badType,
		"HTTP request instead of AMQP": []byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		fr := NewFrameReader(bytes.NewReader(in))
		fr.SetMaxFrameSize(0)
		_, err := fr.ReadFrame()
		e := wantError(t, err, FrameError)
		if !strings.HasPrefix(e.Text, "FRAME_ERROR - ") {
			t.Errorf("%s: text %q", name, e.Text)
		}
	}

	// A stream cut inside a frame is an unexpected EOF, not a FRAME_ERROR.
	for _, in := range [][]byte{good, bigGood} {
		for _, cut := range []int{1, 6, 7, len(in) - 1} {
			fr := NewFrameReader(bytes.NewReader(in[:cut]))
			fr.SetMaxFrameSize(0)
			_, err := fr.ReadFrame()
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut at %d of %d: got %v, want io.ErrUnexpectedEOF", cut, len(in), err)
			}
			var e *Error
			if errors.As(err, &e) {
				t.Errorf("cut at %d: I/O error reported as %v", cut, e)
			}
		}
	}

	// Other I/O errors come back wrapped.
	boom := errors.New("boom")
	fr := NewFrameReader(iotest.ErrReader(boom))
	if _, err := fr.ReadFrame(); !errors.Is(err, boom) {
		t.Errorf("got %v, want wrapped boom", err)
	}
}

func TestReadProtocolHeader(t *testing.T) {
	stream := append(ProtocolHeader[:], AppendHeartbeat(nil)...)
	fr := NewFrameReader(bytes.NewReader(stream))
	h, err := fr.ReadProtocolHeader()
	if err != nil || h != ProtocolHeader {
		t.Fatalf("header %q, %v", h, err)
	}
	if string(h[:]) != "AMQP\x00\x00\x09\x01" {
		t.Fatalf("ProtocolHeader is %q", h)
	}
	f, err := fr.ReadFrame()
	if err != nil || f.Type != FrameHeartbeat {
		t.Fatalf("frame after header: %+v, %v", f, err)
	}

	fr = NewFrameReader(strings.NewReader("AMQP"))
	if _, err := fr.ReadProtocolHeader(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short header: %v", err)
	}
}

func TestFrameReaderBuffered(t *testing.T) {
	stream := AppendHeartbeat(AppendHeartbeat(nil))
	fr := NewFrameReader(bytes.NewReader(stream))
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if fr.Buffered() != 8 {
		t.Fatalf("Buffered = %d after one of two heartbeats, want 8", fr.Buffered())
	}
	fr.ReadFrame()
	if fr.Buffered() != 0 {
		t.Fatalf("Buffered = %d at the end", fr.Buffered())
	}
}

// loopReader serves the same bytes forever, as a busy connection does.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.data[l.off:])
		n += c
		l.off = (l.off + c) % len(l.data)
	}
	return n, nil
}

func TestReadFrameDoesNotAllocate(t *testing.T) {
	for _, size := range []int{0, 100, 4000, 100_000} {
		stream := AppendFrame(nil, Frame{Type: FrameBody, Channel: 1, Payload: make([]byte, size)})
		fr := NewFrameReader(&loopReader{data: stream})
		fr.SetMaxFrameSize(0)
		fr.ReadFrame() // warm up: the large-frame buffer grows once
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := fr.ReadFrame(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("payload %d: %.1f allocations per frame, want 0", size, allocs)
		}
	}
}
