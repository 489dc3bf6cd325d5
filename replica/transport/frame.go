package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Frame types. Wire format; never renumber.
const (
	frameHello   byte = 1 // dialer → acceptor, first frame: who is calling (hello)
	frameWelcome byte = 2 // acceptor → dialer: the hello is accepted (welcome)
	frameRefuse  byte = 3 // acceptor → dialer: the hello is refused, with the reason; then close
	frameMsg     byte = 4 // dialer → acceptor: one raftpb.Message of a group
	framePing    byte = 5 // dialer → acceptor: keepalive while idle
	framePong    byte = 6 // acceptor → dialer: liveness beacon
)

// protocolVersion is the hello's version. Wire format; bump on any
// incompatible change.
const protocolVersion = 1

// Stream kinds, named in the hello. Wire format; never renumber.
const (
	streamSmall byte = 1 // heartbeats, votes, responses: everything small
	streamBulk  byte = 2 // MsgApp, MsgSnap, MsgProp: what carries entries
	streamConn  byte = 3 // one proxied client connection's raw bytes (DialConn)
)

// Bounds of a client connection stream's hello fields.
const (
	maxServiceName = 32  // "amqp", "http"
	maxClientAddr  = 256 // an address's text: "[ipv6%zone]:port" fits
)

// headerSize is a frame's header: length(4) | type(1) | group(8).
const headerSize = 13

// maxHandshakeFrame bounds the frames read before a hello is accepted: an
// unknown caller cannot make us allocate more than this.
const maxHandshakeFrame = 4 << 10

// readChunk is the most allocated ahead of the bytes a frame's body
// actually delivers: a length that lies costs a reader this, not the
// length.
const readChunk = 1 << 20

// errFrameTooLarge is wrapped by a frame reader's error when a frame's
// length passes its bound: the peer is broken or hostile, and the
// connection is closed.
var errFrameTooLarge = errors.New("transport: frame too large")

// errBadFrame is wrapped by the errors of frames that do not decode.
var errBadFrame = errors.New("transport: malformed frame")

// appendHeader appends a frame header for a body of n bytes.
func appendHeader(dst []byte, typ byte, group uint64, n int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+8+n))
	dst = append(dst, typ)
	return binary.BigEndian.AppendUint64(dst, group)
}

// putLength fixes the length of the frame starting at frame[0], whose
// body was appended after its header.
func putLength(frame []byte) {
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
}

// frameReader reads frames from a connection, reusing its buffer: a
// frame's body is valid until the next read.
type frameReader struct {
	r   io.Reader
	hdr [headerSize]byte
	buf []byte
}

// read reads one frame whose body is at most max bytes; beforeChunk, if
// not nil, runs before each read from the connection (to extend a
// deadline while a large frame arrives).
func (fr *frameReader) read(max int, beforeChunk func()) (typ byte, group uint64, body []byte, err error) {
	if beforeChunk != nil {
		beforeChunk()
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	if n < 9 {
		return 0, 0, nil, fmt.Errorf("%w: length %d is shorter than a header", errBadFrame, n)
	}
	size := uint64(n) - 9
	if size > uint64(max) {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes, the bound is %d", errFrameTooLarge, size, max)
	}
	typ = fr.hdr[4]
	group = binary.BigEndian.Uint64(fr.hdr[5:])
	// Grow the buffer as the bytes arrive, a chunk at a time.
	fr.buf = fr.buf[:0]
	for uint64(len(fr.buf)) < size {
		want := min(size-uint64(len(fr.buf)), readChunk)
		start := len(fr.buf)
		fr.buf = slices.Grow(fr.buf, int(want))[:start+int(want)]
		if beforeChunk != nil {
			beforeChunk()
		}
		if _, err := io.ReadFull(fr.r, fr.buf[start:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, nil, err
		}
	}
	// A buffer a huge frame grew is not kept for every later small one.
	body = fr.buf
	if cap(fr.buf) > 4*readChunk {
		fr.buf = nil
	}
	return typ, group, body, nil
}

// hello is the first frame a dialer sends: the protocol version, the
// stream, the cluster, who calls (name and Raft id) and whom it believes
// it called; a client connection stream's adds the service it is for and
// the address of the client it carries. Body:
//
//	version(1) | stream(1) | uvarint(id) | str(cluster) | str(from) | str(to)
//	[ | str(service) | str(client) ]   stream 3 (streamConn) only
//
// where str is uvarint(length) | bytes.
type hello struct {
	version byte
	stream  byte
	id      uint64
	cluster string
	from    string
	to      string
	service string // streamConn: "amqp", "http"
	client  string // streamConn: the proxied client's address
}

func (h hello) append(dst []byte) []byte {
	dst = append(dst, h.version, h.stream)
	dst = binary.AppendUvarint(dst, h.id)
	dst = appendString(dst, h.cluster)
	dst = appendString(dst, h.from)
	dst = appendString(dst, h.to)
	if h.stream == streamConn {
		dst = appendString(dst, h.service)
		dst = appendString(dst, h.client)
	}
	return dst
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < 2 {
		return h, fmt.Errorf("%w: hello of %d bytes", errBadFrame, len(b))
	}
	h.version, h.stream = b[0], b[1]
	if h.version != protocolVersion {
		// The rest may be laid out differently: say only the version.
		return h, nil
	}
	d := decoder{b: b[2:]}
	h.id = d.uvarint()
	h.cluster = d.string()
	h.from = d.string()
	h.to = d.string()
	if h.stream == streamConn {
		h.service = d.string()
		h.client = d.string()
	}
	if err := d.finish("hello"); err != nil {
		return hello{}, err
	}
	return h, nil
}

// welcome is the acceptor's answer to a hello it accepts: its name and
// Raft id. Body: uvarint(id) | str(name).
type welcome struct {
	id   uint64
	name string
}

func (w welcome) append(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, w.id)
	return appendString(dst, w.name)
}

func decodeWelcome(b []byte) (welcome, error) {
	d := decoder{b: b}
	w := welcome{id: d.uvarint(), name: d.string()}
	if err := d.finish("welcome"); err != nil {
		return welcome{}, err
	}
	return w, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decoder reads uvarints and strings, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("string of %d bytes with %d left", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: %w", errBadFrame, what, d.err)
	}
	return nil
}
