package amqp

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

const allFlags = FlagContentType | FlagContentEncoding | FlagHeaders | FlagDeliveryMode |
	FlagPriority | FlagCorrelationID | FlagReplyTo | FlagExpiration | FlagMessageID |
	FlagTimestamp | FlagType | FlagUserID | FlagAppID | FlagClusterID

func fullProperties() Properties {
	return Properties{
		Flags:           allFlags,
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		Headers:         everyType,
		DeliveryMode:    2,
		Priority:        9,
		CorrelationID:   "corr",
		ReplyTo:         "amq.rabbitmq.reply-to",
		Expiration:      "60000",
		MessageID:       "msg-1",
		Timestamp:       1_700_000_000,
		Type:            "order.created",
		UserID:          "guest",
		AppID:           "billing",
		ClusterID:       "c1",
	}
}

func TestPropertiesFlagOrder(t *testing.T) {
	// Bit 15 down to bit 2, in the order of the basic class's property list.
	flags := []uint16{FlagContentType, FlagContentEncoding, FlagHeaders, FlagDeliveryMode,
		FlagPriority, FlagCorrelationID, FlagReplyTo, FlagExpiration, FlagMessageID,
		FlagTimestamp, FlagType, FlagUserID, FlagAppID, FlagClusterID}
	for i, f := range flags {
		if want := uint16(1) << (15 - i); f != want {
			t.Errorf("flag %d is %#04x, want %#04x", i, f, want)
		}
	}
}

func TestPropertiesRoundTripAll(t *testing.T) {
	p := fullProperties()
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, p)
	}
	again, err := got.Append(nil)
	if err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("re-encoding differs (err %v)", err)
	}
}

func TestPropertiesNone(t *testing.T) {
	var p Properties
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, []byte{0, 0}) {
		t.Fatalf("empty properties encode as %x", raw)
	}
	got, err := DecodeProperties(raw)
	if err != nil || !reflect.DeepEqual(got, Properties{}) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// TestPropertiesWireFormat pins the layout of each property on its own.
func TestPropertiesWireFormat(t *testing.T) {
	full := fullProperties()
	headers, _ := AppendTable(nil, full.Headers)
	ss := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	cases := []struct {
		flag uint16
		want []byte
	}{
		{FlagContentType, ss(full.ContentType)},
		{FlagContentEncoding, ss(full.ContentEncoding)},
		{FlagHeaders, headers},
		{FlagDeliveryMode, []byte{2}},
		{FlagPriority, []byte{9}},
		{FlagCorrelationID, ss(full.CorrelationID)},
		{FlagReplyTo, ss(full.ReplyTo)},
		{FlagExpiration, ss(full.Expiration)},
		{FlagMessageID, ss(full.MessageID)},
		{FlagTimestamp, []byte{0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00}},
		{FlagType, ss(full.Type)},
		{FlagUserID, ss(full.UserID)},
		{FlagAppID, ss(full.AppID)},
		{FlagClusterID, ss(full.ClusterID)},
	}
	for _, c := range cases {
		// All fields set, one flag: only that field may be written.
		p := full
		p.Flags = c.flag
		raw, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]byte{byte(c.flag >> 8), byte(c.flag)}, c.want...)
		if !bytes.Equal(raw, want) {
			t.Errorf("flag %#04x: encoded %x, want %x", c.flag, raw, want)
		}
		got, err := DecodeProperties(raw)
		if err != nil {
			t.Fatalf("flag %#04x: %v", c.flag, err)
		}
		if got.Flags != c.flag {
			t.Errorf("flag %#04x: decoded flags %#04x", c.flag, got.Flags)
		}
	}
}

func TestPropertiesAbsentVersusEmpty(t *testing.T) {
	p := Properties{Flags: FlagContentType | FlagHeaders}
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0xa0, 0x00, 0, 0, 0, 0, 0}; !bytes.Equal(raw, want) {
		t.Fatalf("present but empty encodes as %x, want %x", raw, want)
	}
	got, err := DecodeProperties(raw)
	if err != nil || got.Flags != p.Flags {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestPropertiesBitExact(t *testing.T) {
	// Built by hand, not by Append: headers with duplicate keys in
	// non-sorted order, and every shortstr edge (empty, 255 bytes).
	long := strings.Repeat("x", 255)
	headers := []byte{1, 'z', 'V', 1, 'a', 'b', 1, 1, 'z', 't', 1}
	raw := []byte{0xb4, 0x90}                      // content-type, headers, delivery-mode, correlation-id, message-id, user-id
	raw = append(raw, 0)                           // content-type ""
	raw = append(raw, 0, 0, 0, byte(len(headers))) // headers
	raw = append(raw, headers...)
	raw = append(raw, 1)   // delivery-mode
	raw = append(raw, 255) // correlation-id, 255 bytes
	raw = append(raw, long...)
	raw = append(raw, 3, 'm', 'i', 'd') // message-id
	raw = append(raw, 1, 'u')           // user-id
	p, err := DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Append(nil)
	if err != nil || !bytes.Equal(out, raw) {
		t.Fatalf("Append(Decode(raw)) = %x\n                want %x (err %v)", out, raw, err)
	}
}

func TestPropertiesDecodeErrors(t *testing.T) {
	full := fullProperties()
	raw, _ := full.Append(nil)
	for i := 0; i < len(raw); i++ {
		_, err := DecodeProperties(raw[:i])
		if err == nil {
			t.Fatalf("truncation to %d of %d bytes decoded", i, len(raw))
		}
		wantError(t, err, FrameError)
	}
	cases := map[string][]byte{
		"continuation flag (bit 0)": {0x00, 0x01},
		"unused flag bit 1":         {0x80, 0x02, 0},
		"trailing byte":             {0x00, 0x00, 0x00},
		"bad headers table":         {0x20, 0x00, 0, 0, 0, 3, 1, 'k', 'Z'},
	}
	for name, b := range cases {
		_, err := DecodeProperties(b)
		if err == nil {
			t.Errorf("%s: decoded", name)
			continue
		}
		e := wantError(t, err, FrameError)
		if !strings.HasPrefix(e.Text, "FRAME_ERROR - cannot decode basic properties: ") {
			t.Errorf("%s: text %q", name, e.Text)
		}
	}
}

func TestPropertiesAppendErrors(t *testing.T) {
	dst := []byte("keep")
	for _, p := range []Properties{
		{Flags: FlagHeaders, Headers: Table{{"k", uint64(1)}}},
		{Flags: 0x0001},
	} {
		out, err := p.Append(dst)
		wantError(t, err, InternalError)
		if string(out) != "keep" {
			t.Errorf("dst changed to %q on error", out)
		}
	}
	// Without its flag, a bad table is not encoded and cannot fail.
	p := Properties{Headers: Table{{"k", uint64(1)}}}
	if _, err := p.Append(nil); err != nil {
		t.Errorf("unflagged headers were encoded: %v", err)
	}
}

func TestPropertiesTruncateLongShortstr(t *testing.T) {
	p := Properties{Flags: FlagMessageID, MessageID: strings.Repeat("é", 200)} // 400 bytes
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.MessageID) != 254 || got.MessageID != strings.Repeat("é", 127) {
		t.Fatalf("truncated to %d bytes %q", len(got.MessageID), got.MessageID)
	}
}

func TestPropertiesNoAliasing(t *testing.T) {
	p := fullProperties()
	raw, _ := p.Append(nil)
	got, err := DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 0x5a
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatal("decoded properties changed when the input was overwritten")
	}
}

func TestContentHeaderFrame(t *testing.T) {
	p := fullProperties()
	raw, _ := p.Append(nil)
	frame := AppendHeaderFrame(nil, 7, ClassBasic, 123456789012, raw)
	fr := NewFrameReader(bytes.NewReader(frame))
	fr.SetMaxFrameSize(0)
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != FrameHeader || f.Channel != 7 {
		t.Fatalf("frame type %d channel %d", f.Type, f.Channel)
	}
	if !bytes.Equal(f.Payload[2:4], []byte{0, 0}) {
		t.Fatalf("weight %x, want 0", f.Payload[2:4])
	}
	class, size, rawProps, err := ParseContentHeader(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if class != ClassBasic || size != 123456789012 || !bytes.Equal(rawProps, raw) {
		t.Fatalf("class %d size %d props %x", class, size, rawProps)
	}

	// A nonzero weight is accepted and ignored.
	payload := append([]byte(nil), f.Payload...)
	payload[3] = 5
	if _, _, _, err := ParseContentHeader(payload); err != nil {
		t.Fatalf("nonzero weight: %v", err)
	}
	for i := 0; i < 14; i++ {
		_, _, _, err := ParseContentHeader(payload[:i])
		wantError(t, err, FrameError)
	}
}

func TestAppendBodyFrames(t *testing.T) {
	const frameMax = 4096
	const chunk = frameMax - 8
	for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk, 2*chunk + 1, 5*chunk + 17} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i * 7)
		}
		out := AppendBodyFrames([]byte("pre"), 3, body, frameMax)
		if string(out[:3]) != "pre" {
			t.Fatal("dst prefix lost")
		}
		fr := NewFrameReader(bytes.NewReader(out[3:]))
		fr.SetMaxFrameSize(frameMax)
		var got []byte
		frames := 0
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				break
			}
			frames++
			if f.Type != FrameBody || f.Channel != 3 {
				t.Fatalf("frame type %d channel %d", f.Type, f.Channel)
			}
			if len(f.Payload)+8 > frameMax {
				t.Fatalf("body %d: frame of %d bytes over %d", n, len(f.Payload)+8, frameMax)
			}
			if len(f.Payload) == 0 {
				t.Fatalf("body %d: empty body frame", n)
			}
			got = append(got, f.Payload...)
		}
		if want := (n + chunk - 1) / chunk; frames != want {
			t.Errorf("body %d: %d frames, want %d", n, frames, want)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("body %d: reassembled body differs", n)
		}
		if len(out)-3 != n+8*frames {
			t.Errorf("body %d: %d bytes written, want %d", n, len(out)-3, n+8*frames)
		}
	}

	if out := AppendBodyFrames(nil, 1, make([]byte, 1<<20), 0); len(out) != 1<<20+8 {
		t.Errorf("frameMax 0 should give one frame, wrote %d bytes", len(out))
	}
	if out := AppendBodyFrames(nil, 1, []byte("abc"), 9); len(out) != 3*9 {
		t.Errorf("frameMax 9 should give 1-byte frames, wrote %d bytes", len(out))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("frameMax 8 did not panic")
			}
		}()
		AppendBodyFrames(nil, 1, []byte("x"), 8)
	}()
}

func TestAppendHeartbeat(t *testing.T) {
	if got := AppendHeartbeat([]byte{1}); !bytes.Equal(got, []byte{1, 8, 0, 0, 0, 0, 0, 0, 0xce}) {
		t.Fatalf("heartbeat %x", got)
	}
}
