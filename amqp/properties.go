package amqp

import (
	"encoding/binary"
	"math"
	"slices"
)

// Property flags of the basic class, in the order of the class's property
// list: the first property is bit 15. Wire format; never renumber.
const (
	FlagContentType     uint16 = 0x8000
	FlagContentEncoding uint16 = 0x4000
	FlagHeaders         uint16 = 0x2000
	FlagDeliveryMode    uint16 = 0x1000
	FlagPriority        uint16 = 0x0800
	FlagCorrelationID   uint16 = 0x0400
	FlagReplyTo         uint16 = 0x0200
	FlagExpiration      uint16 = 0x0100
	FlagMessageID       uint16 = 0x0080
	FlagTimestamp       uint16 = 0x0040
	FlagType            uint16 = 0x0020
	FlagUserID          uint16 = 0x0010
	FlagAppID           uint16 = 0x0008
	FlagClusterID       uint16 = 0x0004

	// flagsUnused are the bits no basic property uses: bit 1, and bit 0,
	// which would announce a second flags word.
	flagsUnused uint16 = 0x0003
)

// Properties are the basic class's content properties, the part of a content
// header after the body size. A field is present on the wire exactly when its
// bit is set in Flags, which keeps "absent" apart from "empty" and lets a
// decoded header re-encode to the same bytes. Setting a field therefore
// means setting its flag too.
type Properties struct {
	Flags           uint16
	ContentType     string
	ContentEncoding string
	Headers         Table
	DeliveryMode    uint8 // 1 transient, 2 persistent
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string // per-message TTL in milliseconds, as decimal text
	MessageID       string
	Timestamp       uint64 // seconds since the Unix epoch
	Type            string
	UserID          string
	AppID           string
	ClusterID       string
}

// DecodeProperties decodes raw — the property flags and property list, which
// follow the body size in a content header payload — for the basic class.
// raw must hold exactly the properties its flags announce. Errors are *Error
// with Code FrameError. The result does not alias raw.
//
// Append of the result reproduces raw bit for bit, except that a header
// table's bool octets other than 0 and 1 come back as 1.
func DecodeProperties(raw []byte) (Properties, error) {
	d := decoder{b: raw}
	p := Properties{Flags: d.short("property-flags")}
	f := p.Flags
	if d.err == nil && f&flagsUnused != 0 {
		return Properties{}, Errorf(FrameError, "cannot decode basic properties: property flags %#04x set bits no basic property uses", f)
	}
	if f&FlagContentType != 0 {
		p.ContentType = d.shortstr("content-type")
	}
	if f&FlagContentEncoding != 0 {
		p.ContentEncoding = d.shortstr("content-encoding")
	}
	if f&FlagHeaders != 0 {
		p.Headers = d.table("headers")
	}
	if f&FlagDeliveryMode != 0 {
		p.DeliveryMode = d.octet("delivery-mode")
	}
	if f&FlagPriority != 0 {
		p.Priority = d.octet("priority")
	}
	if f&FlagCorrelationID != 0 {
		p.CorrelationID = d.shortstr("correlation-id")
	}
	if f&FlagReplyTo != 0 {
		p.ReplyTo = d.shortstr("reply-to")
	}
	if f&FlagExpiration != 0 {
		p.Expiration = d.shortstr("expiration")
	}
	if f&FlagMessageID != 0 {
		p.MessageID = d.shortstr("message-id")
	}
	if f&FlagTimestamp != 0 {
		p.Timestamp = d.longlong("timestamp")
	}
	if f&FlagType != 0 {
		p.Type = d.shortstr("type")
	}
	if f&FlagUserID != 0 {
		p.UserID = d.shortstr("user-id")
	}
	if f&FlagAppID != 0 {
		p.AppID = d.shortstr("app-id")
	}
	if f&FlagClusterID != 0 {
		p.ClusterID = d.shortstr("cluster-id")
	}
	if d.err != nil {
		return Properties{}, Errorf(FrameError, "cannot decode basic properties: %s", d.err.Error())
	}
	// Unlike method arguments, trailing bytes here are not tolerated: they
	// would be silently lost when the properties are re-encoded.
	if len(d.b) != 0 {
		return Properties{}, Errorf(FrameError, "cannot decode basic properties: %d bytes after the last property", len(d.b))
	}
	return p, nil
}

// Append appends the property flags and exactly the properties whose flag is
// set to dst. Shortstr properties over 255 bytes are truncated. It fails,
// with an *Error of Code InternalError and dst unchanged, if Headers cannot
// be encoded or Flags sets a bit no property uses.
func (p *Properties) Append(dst []byte) ([]byte, error) {
	f := p.Flags
	if f&flagsUnused != 0 {
		return dst, Errorf(InternalError, "cannot encode basic properties: property flags %#04x set bits no basic property uses", f)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, f)
	if f&FlagContentType != 0 {
		dst = appendShortstr(dst, p.ContentType)
	}
	if f&FlagContentEncoding != 0 {
		dst = appendShortstr(dst, p.ContentEncoding)
	}
	if f&FlagHeaders != 0 {
		var err error
		if dst, err = AppendTable(dst, p.Headers); err != nil {
			return dst[:start], err
		}
	}
	if f&FlagDeliveryMode != 0 {
		dst = append(dst, p.DeliveryMode)
	}
	if f&FlagPriority != 0 {
		dst = append(dst, p.Priority)
	}
	if f&FlagCorrelationID != 0 {
		dst = appendShortstr(dst, p.CorrelationID)
	}
	if f&FlagReplyTo != 0 {
		dst = appendShortstr(dst, p.ReplyTo)
	}
	if f&FlagExpiration != 0 {
		dst = appendShortstr(dst, p.Expiration)
	}
	if f&FlagMessageID != 0 {
		dst = appendShortstr(dst, p.MessageID)
	}
	if f&FlagTimestamp != 0 {
		dst = binary.BigEndian.AppendUint64(dst, p.Timestamp)
	}
	if f&FlagType != 0 {
		dst = appendShortstr(dst, p.Type)
	}
	if f&FlagUserID != 0 {
		dst = appendShortstr(dst, p.UserID)
	}
	if f&FlagAppID != 0 {
		dst = appendShortstr(dst, p.AppID)
	}
	if f&FlagClusterID != 0 {
		dst = appendShortstr(dst, p.ClusterID)
	}
	return dst, nil
}

// contentHeaderFixed is class-id, weight and body-size: the part of a content
// header payload before the property flags.
const contentHeaderFixed = 2 + 2 + 8

// ParseContentHeader splits a content header frame payload. rawProps (the
// property flags and list, for DecodeProperties) aliases payload: copy it to
// keep it past the frame. The weight field is read past and ignored, as
// RabbitMQ does. A payload too short for the fixed fields and the flags is an
// *Error with Code FrameError.
func ParseContentHeader(payload []byte) (classID uint16, bodySize uint64, rawProps []byte, err error) {
	if len(payload) < contentHeaderFixed+2 {
		return 0, 0, nil, Errorf(FrameError, "content header payload of %d bytes is shorter than the %d its fixed fields need", len(payload), contentHeaderFixed+2)
	}
	classID = binary.BigEndian.Uint16(payload)
	bodySize = binary.BigEndian.Uint64(payload[4:])
	return classID, bodySize, payload[contentHeaderFixed:], nil
}

// AppendHeaderFrame appends a content header frame to dst, with weight 0 and
// rawProps (as from ParseContentHeader or Properties.Append) copied verbatim,
// so that a broker can forward properties without decoding them.
func AppendHeaderFrame(dst []byte, channel uint16, classID uint16, bodySize uint64, rawProps []byte) []byte {
	dst = append(dst, FrameHeader, byte(channel>>8), byte(channel))
	dst = binary.BigEndian.AppendUint32(dst, uint32(contentHeaderFixed+len(rawProps)))
	dst = binary.BigEndian.AppendUint16(dst, classID)
	dst = append(dst, 0, 0) // weight, unused
	dst = binary.BigEndian.AppendUint64(dst, bodySize)
	dst = append(dst, rawProps...)
	return append(dst, FrameEnd)
}

// AppendBodyFrames appends body to dst as body frames of at most frameMax
// bytes each, 8 bytes of framing included; frameMax 0 means no limit. An empty
// body takes no frames. frameMax is the negotiated maximum, at least
// FrameMinSize by the protocol; a value of 8 or less leaves no room for
// payload and panics.
func AppendBodyFrames(dst []byte, channel uint16, body []byte, frameMax uint32) []byte {
	if len(body) == 0 {
		return dst
	}
	chunk := uint64(math.MaxUint32)
	if frameMax != 0 {
		if frameMax <= frameOverhead {
			panic("amqp: AppendBodyFrames: frameMax leaves no room for payload")
		}
		chunk = uint64(frameMax - frameOverhead)
	}
	frames := (uint64(len(body)) + chunk - 1) / chunk
	dst = slices.Grow(dst, len(body)+int(frames)*frameOverhead)
	for len(body) > 0 {
		n := len(body)
		if uint64(n) > chunk {
			n = int(chunk)
		}
		dst = append(dst, FrameBody, byte(channel>>8), byte(channel))
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		dst = append(dst, body[:n]...)
		dst = append(dst, FrameEnd)
		body = body[n:]
	}
	return dst
}

// AppendHeartbeat appends a heartbeat frame (channel 0, empty payload).
func AppendHeartbeat(dst []byte) []byte {
	return append(dst, FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd)
}
