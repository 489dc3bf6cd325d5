package amqp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// ProtocolHeader is what an AMQP 0-9-1 client sends before its first frame.
var ProtocolHeader = [8]byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}

const (
	frameHeaderSize = 7                   // type, channel, payload size
	frameOverhead   = frameHeaderSize + 1 // plus the frame-end octet

	// InitialFrameMax is the frame size limit a FrameReader starts with, for
	// the handshake before connection.tune settles the real one. It is
	// RabbitMQ's initial_frame_max since 4.1: room for an OAuth 2 token in
	// connection.start-ok, while a peer that has not authenticated cannot
	// make the broker buffer much.
	InitialFrameMax = 8192

	// readBufferSize is the FrameReader's buffer. Frames that fit are
	// returned in place, without a copy; larger ones are read into a separate
	// buffer. 32 KiB holds a few hundred small messages per read call while
	// keeping ten thousand idle connections to a few hundred MiB.
	readBufferSize = 32 << 10
)

// Frame is one AMQP frame. Payload excludes the 7-byte header and the
// frame-end octet.
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// AppendFrame appends f, framed, to dst.
func AppendFrame(dst []byte, f Frame) []byte {
	dst = append(dst, f.Type, byte(f.Channel>>8), byte(f.Channel))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(f.Payload)))
	dst = append(dst, f.Payload...)
	return append(dst, FrameEnd)
}

// FrameReader reads frames from a connection through its own buffer. It is
// not safe for concurrent use; a connection has one reading goroutine.
type FrameReader struct {
	r   *bufio.Reader
	max uint32 // total frame size limit, 8 bytes of framing included; 0 = none
	buf []byte // payloads larger than r's buffer; reused
}

// NewFrameReader returns a FrameReader on r with the limit InitialFrameMax.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, readBufferSize), max: InitialFrameMax}
}

// SetMaxFrameSize sets the largest frame ReadFrame accepts, as negotiated in
// connection.tune: n counts the whole frame, 8 bytes of framing included.
// 0 means no limit, which lets a peer make the reader buffer up to 4 GiB.
func (fr *FrameReader) SetMaxFrameSize(n uint32) { fr.max = n }

// Buffered returns the number of bytes read from the connection but not yet
// returned as frames. A broker can flush its replies when it reaches 0,
// answering a burst of frames with one write.
func (fr *FrameReader) Buffered() int { return fr.r.Buffered() }

// ReadProtocolHeader reads the 8 bytes a client sends first. It does not
// check them: a broker that gets something other than ProtocolHeader answers
// with its own header before closing, which only the caller can do.
func (fr *FrameReader) ReadProtocolHeader() ([8]byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return h, fmt.Errorf("read protocol header: %w", err)
	}
	return h, nil
}

// ReadFrame reads the next frame. Its Payload is valid only until the next
// call: it points into the reader's buffers, so that the steady state reads
// frames without allocating.
//
// HasFrame reports whether a whole frame is in the read buffer: the next
// ReadFrame returns it without reading from the connection.
func (fr *FrameReader) HasFrame() bool {
	n := fr.r.Buffered()
	if n < frameHeaderSize {
		return false
	}
	hdr, _ := fr.r.Peek(frameHeaderSize) // buffered: no read
	return uint64(n) >= uint64(binary.BigEndian.Uint32(hdr[3:]))+frameOverhead
}

// A frame over the size limit, of an unknown type, or not closed by the
// frame-end octet is an *Error with Code FrameError; the stream cannot be
// resynchronised after one. Read errors are wrapped: errors.Is(err, io.EOF)
// reports a connection closed between frames, io.ErrUnexpectedEOF one
// closed inside a frame.
func (fr *FrameReader) ReadFrame() (Frame, error) {
	hdr, err := fr.r.Peek(frameHeaderSize)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("read frame header: %w", err)
	}
	typ := hdr[0]
	channel := binary.BigEndian.Uint16(hdr[1:])
	size := binary.BigEndian.Uint32(hdr[3:])
	switch typ {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return Frame{}, Errorf(FrameError, "unknown frame type %d on channel %d", typ, channel)
	}
	total := uint64(size) + frameOverhead
	if fr.max != 0 && total > uint64(fr.max) {
		return Frame{}, Errorf(FrameError, "frame size %d exceeds negotiated maximum %d", total, fr.max)
	}

	var payload []byte
	var end byte
	if total <= uint64(fr.r.Size()) {
		// The common case: return the frame in place from the read buffer.
		b, err := fr.r.Peek(int(total))
		if err != nil {
			return Frame{}, fmt.Errorf("read frame payload: %w", unexpected(err))
		}
		payload = b[frameHeaderSize : frameHeaderSize+size : frameHeaderSize+size]
		end = b[total-1]
		_, _ = fr.r.Discard(int(total)) // cannot fail: Peek just returned that much
	} else {
		_, _ = fr.r.Discard(frameHeaderSize)
		if payload, err = fr.readLarge(size); err != nil {
			return Frame{}, fmt.Errorf("read frame payload: %w", unexpected(err))
		}
		if end, err = fr.r.ReadByte(); err != nil {
			return Frame{}, fmt.Errorf("read frame end: %w", unexpected(err))
		}
	}
	if end != FrameEnd {
		return Frame{}, Errorf(FrameError, "type %d frame on channel %d with %d byte payload ends with %#02x, not frame-end %#02x", typ, channel, size, end, FrameEnd)
	}
	return Frame{Type: typ, Channel: channel, Payload: payload}, nil
}

// readLarge reads an n-byte payload that does not fit the read buffer into
// fr.buf. The buffer grows as bytes arrive rather than to n at once: until
// the frame is complete, n is only the peer's claim.
func (fr *FrameReader) readLarge(n uint32) ([]byte, error) {
	buf := fr.buf[:0]
	for uint32(len(buf)) < n {
		want := int(min(uint64(n), max(2*uint64(cap(buf)), 4*readBufferSize)))
		if cap(buf) < want {
			nb := make([]byte, len(buf), want)
			copy(nb, buf)
			buf = nb
		}
		m, err := io.ReadFull(fr.r, buf[len(buf):want])
		buf = buf[:len(buf)+m]
		if err != nil {
			fr.buf = buf[:0]
			return nil, err
		}
	}
	fr.buf = buf[:0]
	return buf[:n:n], nil
}

// unexpected turns io.EOF into io.ErrUnexpectedEOF: past the header, the
// stream ended inside a frame.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
