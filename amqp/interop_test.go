package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestInteropAMQP091Client drives github.com/rabbitmq/amqp091-go, the client
// brokerd's behaviour tests use, against a scripted server built only from
// this package: handshake, publish with every property, consume and deliver
// split across frames, ack/nack bits, queue.declare, and a channel.close.
// It checks the codec against an independent implementation of the protocol.
func TestInteropAMQP091Client(t *testing.T) {
	srvConn, cliConn := net.Pipe()
	deadline := time.Now().Add(20 * time.Second)
	srvConn.SetDeadline(deadline)
	cliConn.SetDeadline(deadline)

	body := bytes.Repeat([]byte("0123456789abcdef"), 700) // 11200 bytes: three frames at frame_max 4096
	ts := time.Unix(1_700_000_000, 0)

	srvErr := make(chan error, 1)
	go func() {
		err := scriptedServer(srvConn, body)
		srvConn.Close()
		srvErr <- err
	}()

	// A client failure is usually the symptom of a server-side check; show both.
	fatalf := func(format string, args ...any) {
		t.Helper()
		var serr error
		select {
		case serr = <-srvErr:
			srvErr <- serr
		case <-time.After(2 * time.Second):
			serr = errors.New("still running")
		}
		t.Fatalf(format+"\nserver: %v", append(args, serr)...)
	}

	conn, err := amqp091.Open(cliConn, amqp091.Config{
		SASL:      []amqp091.Authentication{&amqp091.PlainAuth{Username: "guest", Password: "guest"}},
		Vhost:     "/",
		FrameSize: 4096,
		Locale:    "en_US",
	})
	if err != nil {
		fatalf("open: %v", err)
	}
	if got := conn.Properties["product"]; got != "brokerd" {
		t.Errorf("client saw server product %v", got)
	}
	ch, err := conn.Channel()
	if err != nil {
		fatalf("channel: %v", err)
	}
	err = ch.PublishWithContext(context.Background(), "ex", "rk", true, false, amqp091.Publishing{
		Headers:         amqp091.Table{"s": "str", "i": int32(-7), "l": int64(1 << 40), "arr": []any{"a", int32(1)}, "t": ts, "b": true},
		ContentType:     "text/plain",
		ContentEncoding: "utf-8",
		DeliveryMode:    2,
		Priority:        3,
		CorrelationId:   "corr",
		ReplyTo:         "reply",
		Expiration:      "60000",
		MessageId:       "mid",
		Timestamp:       ts,
		Type:            "typ",
		UserId:          "guest",
		AppId:           "app",
		Body:            body,
	})
	if err != nil {
		fatalf("publish: %v", err)
	}
	deliveries, err := ch.Consume("q", "ctag", false, true, false, false, amqp091.Table{"x-priority": int32(5)})
	if err != nil {
		fatalf("consume: %v", err)
	}
	var d amqp091.Delivery
	select {
	case d = <-deliveries:
	case <-time.After(10 * time.Second):
		fatalf("no delivery")
	}
	if d.ConsumerTag != "ctag" || d.DeliveryTag != 1 || !d.Redelivered || d.Exchange != "ex" || d.RoutingKey != "rk" {
		t.Errorf("delivery method fields: %+v", d)
	}
	if !bytes.Equal(d.Body, body) {
		t.Errorf("delivery body of %d bytes differs", len(d.Body))
	}
	if d.ContentType != "application/json" || d.DeliveryMode != 1 || d.Priority != 0 || d.MessageId != "m2" || !d.Timestamp.Equal(ts) {
		t.Errorf("delivery properties: %+v", d)
	}
	wantHeaders := amqp091.Table{
		"bool": true, "int8": int8(-5), "uint8": uint8(250), "int16": int16(-300), "uint16": uint16(65000),
		"int32": int32(-70000), "uint32": uint32(4_000_000_000), "int64": int64(-1 << 40),
		"float32": float32(1.5), "float64": -2.25, "decimal": amqp091.Decimal{Scale: 2, Value: -12345},
		"longstr": "héllo", "binary": []byte{0, 1, 0xff}, "array": []any{int32(1), "two"},
		"timestamp": ts, "table": amqp091.Table{"deep": int64(7)}, "void": nil,
	}
	if !reflect.DeepEqual(d.Headers, wantHeaders) {
		t.Errorf("delivery headers:\n got %#v\nwant %#v", d.Headers, wantHeaders)
	}
	if err := d.Ack(false); err != nil {
		fatalf("ack: %v", err)
	}
	if err := ch.Nack(5, true, false); err != nil {
		fatalf("nack: %v", err)
	}
	q, err := ch.QueueDeclare("q2", true, false, true, false, amqp091.Table{"x-max-length": int64(10)})
	if err != nil {
		fatalf("queue.declare: %v", err)
	}
	if q.Name != "q2" || q.Messages != 7 || q.Consumers != 2 {
		t.Errorf("queue.declare-ok: %+v", q)
	}
	_, err = ch.QueueDeclarePassive("missing", false, false, false, false, nil)
	var aerr *amqp091.Error
	if !errors.As(err, &aerr) || aerr.Code != NotFound || aerr.Reason != "NOT_FOUND - no queue 'missing' in vhost '/'" {
		fatalf("passive declare of a missing queue: %v", err)
	}
	if err := conn.Close(); err != nil {
		fatalf("close: %v", err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// scriptedServer plays the broker's side of the conversation in
// TestInteropAMQP091Client, checking what the client sends.
func scriptedServer(c net.Conn, body []byte) error {
	fr := NewFrameReader(c)
	var out []byte
	send := func(channel uint16, m Method) error {
		out = AppendMethodFrame(out[:0], channel, m)
		_, err := c.Write(out)
		return err
	}
	// expect reads frames until a method arrives, skipping heartbeats.
	expect := func(channel uint16, want Method) (Method, error) {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", want.Name(), err)
			}
			if f.Type == FrameHeartbeat {
				continue
			}
			if f.Type != FrameMethod || f.Channel != channel {
				return nil, fmt.Errorf("want %s on channel %d, got frame type %d on channel %d", want.Name(), channel, f.Type, f.Channel)
			}
			m, err := DecodeMethod(f.Payload)
			if err != nil {
				return nil, err
			}
			if reflect.TypeOf(m) != reflect.TypeOf(want) {
				return nil, fmt.Errorf("want %s, got %s", want.Name(), m.Name())
			}
			return m, nil
		}
	}
	check := func(cond bool, format string, args ...any) error {
		if !cond {
			return fmt.Errorf(format, args...)
		}
		return nil
	}

	hdr, err := fr.ReadProtocolHeader()
	if err != nil {
		return err
	}
	if err := check(hdr == ProtocolHeader, "protocol header %q", hdr); err != nil {
		return err
	}
	err = send(0, &ConnectionStart{VersionMajor: 0, VersionMinor: 9, Mechanisms: "PLAIN AMQPLAIN", Locales: "en_US",
		ServerProperties: Table{{"product", "brokerd"}, {"capabilities", Table{{"publisher_confirms", true}, {"basic.nack", true}}}}})
	if err != nil {
		return err
	}
	m, err := expect(0, &ConnectionStartOk{})
	if err != nil {
		return err
	}
	sok := m.(*ConnectionStartOk)
	caps, _ := sok.ClientProperties.Get("capabilities")
	if err := check(sok.Mechanism == "PLAIN" && sok.Response == "\x00guest\x00guest" && sok.Locale == "en_US" && caps != nil,
		"start-ok %+v", sok); err != nil {
		return err
	}
	if err := send(0, &ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 0}); err != nil {
		return err
	}
	if m, err = expect(0, &ConnectionTuneOk{}); err != nil {
		return err
	}
	tok := m.(*ConnectionTuneOk)
	if err := check(tok.FrameMax == 4096 && tok.ChannelMax == 2047, "tune-ok %+v", tok); err != nil {
		return err
	}
	fr.SetMaxFrameSize(tok.FrameMax)
	if m, err = expect(0, &ConnectionOpen{}); err != nil {
		return err
	}
	if err := check(m.(*ConnectionOpen).VirtualHost == "/", "open %+v", m); err != nil {
		return err
	}
	if err := send(0, &ConnectionOpenOk{}); err != nil {
		return err
	}
	if _, err = expect(1, &ChannelOpen{}); err != nil {
		return err
	}
	if err := send(1, &ChannelOpenOk{}); err != nil {
		return err
	}

	// basic.publish, content header, body frames.
	if m, err = expect(1, &BasicPublish{}); err != nil {
		return err
	}
	pub := m.(*BasicPublish)
	if err := check(pub.Exchange == "ex" && pub.RoutingKey == "rk" && pub.Mandatory && !pub.Immediate, "publish %+v", pub); err != nil {
		return err
	}
	f, err := fr.ReadFrame()
	if err != nil {
		return err
	}
	class, size, rawProps, err := ParseContentHeader(f.Payload)
	if err != nil {
		return err
	}
	props, err := DecodeProperties(rawProps)
	if err != nil {
		return err
	}
	if err := check(f.Type == FrameHeader && class == ClassBasic && size == uint64(len(body)), "header frame type %d class %d size %d", f.Type, class, size); err != nil {
		return err
	}
	want := Properties{Flags: allFlags &^ FlagClusterID, ContentType: "text/plain", ContentEncoding: "utf-8",
		DeliveryMode: 2, Priority: 3, CorrelationID: "corr", ReplyTo: "reply", Expiration: "60000", MessageID: "mid",
		Timestamp: 1_700_000_000, Type: "typ", UserID: "guest", AppID: "app"}
	gotHeaders := props.Headers
	props.Headers = nil
	if err := check(reflect.DeepEqual(props, want), "properties\n got %+v\nwant %+v", props, want); err != nil {
		return err
	}
	for key, v := range map[string]any{"s": "str", "i": int32(-7), "l": int64(1 << 40), "arr": []any{"a", int32(1)}, "t": Timestamp(1_700_000_000), "b": true} {
		got, ok := gotHeaders.Get(key)
		if err := check(ok && reflect.DeepEqual(got, v), "header %q = %#v, want %#v", key, got, v); err != nil {
			return err
		}
	}
	var got []byte
	for uint64(len(got)) < size {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := check(f.Type == FrameBody && len(f.Payload)+8 <= 4096, "body frame type %d of %d bytes", f.Type, len(f.Payload)); err != nil {
			return err
		}
		got = append(got, f.Payload...)
	}
	if err := check(bytes.Equal(got, body), "published body differs"); err != nil {
		return err
	}

	// basic.consume, then a delivery split across frames.
	if m, err = expect(1, &BasicConsume{}); err != nil {
		return err
	}
	con := m.(*BasicConsume)
	prio, _ := con.Arguments.Get("x-priority")
	if err := check(con.Queue == "q" && con.ConsumerTag == "ctag" && !con.NoAck && con.Exclusive && !con.NoLocal && !con.Nowait && prio == int32(5),
		"consume %+v", con); err != nil {
		return err
	}
	if err := send(1, &BasicConsumeOk{ConsumerTag: "ctag"}); err != nil {
		return err
	}
	headers := Table{}
	for _, f := range everyType {
		switch f.Key {
		case "", "dup", "z-bool", "a-bool", "table", "array":
		default:
			headers = append(headers, f)
		}
	}
	headers = append(headers, Field{"bool", true}, Field{"array", []any{int32(1), "two"}}, Field{"table", Table{{"deep", int64(7)}}})
	dp := Properties{Flags: FlagContentType | FlagHeaders | FlagDeliveryMode | FlagPriority | FlagMessageID | FlagTimestamp,
		ContentType: "application/json", Headers: headers, DeliveryMode: 1, MessageID: "m2", Timestamp: 1_700_000_000}
	raw, err := dp.Append(nil)
	if err != nil {
		return err
	}
	out = AppendMethodFrame(out[:0], 1, &BasicDeliver{ConsumerTag: "ctag", DeliveryTag: 1, Redelivered: true, Exchange: "ex", RoutingKey: "rk"})
	out = AppendHeaderFrame(out, 1, ClassBasic, uint64(len(body)), raw)
	out = AppendBodyFrames(out, 1, body, 4096)
	if _, err := c.Write(out); err != nil {
		return err
	}
	if m, err = expect(1, &BasicAck{}); err != nil {
		return err
	}
	if err := check(*m.(*BasicAck) == BasicAck{DeliveryTag: 1}, "ack %+v", m); err != nil {
		return err
	}
	if m, err = expect(1, &BasicNack{}); err != nil {
		return err
	}
	if err := check(*m.(*BasicNack) == BasicNack{DeliveryTag: 5, Multiple: true}, "nack %+v", m); err != nil {
		return err
	}

	if m, err = expect(1, &QueueDeclare{}); err != nil {
		return err
	}
	qd := m.(*QueueDeclare)
	maxLen, _ := qd.Arguments.Get("x-max-length")
	if err := check(qd.Queue == "q2" && qd.Durable && !qd.AutoDelete && qd.Exclusive && !qd.Passive && !qd.Nowait && maxLen == int64(10),
		"queue.declare %+v", qd); err != nil {
		return err
	}
	if err := send(1, &QueueDeclareOk{Queue: "q2", MessageCount: 7, ConsumerCount: 2}); err != nil {
		return err
	}
	if m, err = expect(1, &QueueDeclare{}); err != nil {
		return err
	}
	if err := check(m.(*QueueDeclare).Passive, "second queue.declare is not passive"); err != nil {
		return err
	}
	e := Errorf(NotFound, "no queue '%s' in vhost '/'", m.(*QueueDeclare).Queue)
	if err := send(1, &ChannelClose{ReplyCode: e.Code, ReplyText: e.Text, FailingClassID: m.ClassID(), FailingMethodID: m.MethodID()}); err != nil {
		return err
	}
	if _, err = expect(1, &ChannelCloseOk{}); err != nil {
		return err
	}
	if m, err = expect(0, &ConnectionClose{}); err != nil {
		return err
	}
	if err := check(m.(*ConnectionClose).ReplyCode == ReplySuccess, "close %+v", m); err != nil {
		return err
	}
	return send(0, &ConnectionCloseOk{})
}
