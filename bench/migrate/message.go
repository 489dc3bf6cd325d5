package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A migration message carries who sent it twice: in its headers and in its
// body, so the checker can tell that what arrived is what was sent, body,
// headers and properties alike (the shovel must keep them all).
//
// Headers:
//
//	x-migrate-producer  "fill" or "live" (the stream; see ledger.go)
//	x-migrate-seq       the sequence number in that stream and queue (long)
//	x-migrate-via       "rabbitmq" or "brokerd": the broker it was published to
//
// Body (-size bytes, at least bodyHeader):
//
//	magic "mgrt" | queue uint16 | producer uint16 | seq uint64 | sent unix ns int64 | padding
//
// The padding's byte i is byte(seq*31 + i), so a body altered on the way
// is told from the original.
const bodyHeader = 24

var bodyMagic = [4]byte{'m', 'g', 'r', 't'}

// The streams: every (producer, queue) pair numbers its messages from 0.
const (
	producerFill = 0
	producerLive = 1
)

var producerNames = [...]string{producerFill: "fill", producerLive: "live"}

// Header names and the fixed properties every message carries.
const (
	headerProducer = "x-migrate-producer"
	headerSeq      = "x-migrate-seq"
	headerVia      = "x-migrate-via"
	contentType    = "application/x-migrate"
	appID          = "bench-migrate"
	msgType        = "migrate"
)

// messageID is the message-id property of message seq of producer in
// queue q.
func messageID(q, producer int, seq uint64) string {
	return fmt.Sprintf("q%d.%s.%d", q, producerNames[producer], seq)
}

// newMessage builds message seq of producer for queue q, published to via,
// in buf (reused when large enough).
func newMessage(buf []byte, size, q, producer int, seq uint64, via string, now time.Time) amqp091.Publishing {
	n := max(size, bodyHeader)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	b := buf[:n]
	copy(b, bodyMagic[:])
	binary.BigEndian.PutUint16(b[4:], uint16(q))
	binary.BigEndian.PutUint16(b[6:], uint16(producer))
	binary.BigEndian.PutUint64(b[8:], seq)
	binary.BigEndian.PutUint64(b[16:], uint64(now.UnixNano()))
	for i := bodyHeader; i < n; i++ {
		b[i] = byte(seq*31 + uint64(i))
	}
	return amqp091.Publishing{
		Headers: amqp091.Table{
			headerProducer: producerNames[producer],
			headerSeq:      int64(seq),
			headerVia:      via,
		},
		ContentType:  contentType,
		DeliveryMode: amqp091.Persistent,
		MessageId:    messageID(q, producer, seq),
		Timestamp:    now.Truncate(time.Second),
		Type:         msgType,
		AppId:        appID,
		Body:         b,
	}
}

// msgInfo is what the checker reads from one delivery.
type msgInfo struct {
	queue    int
	producer int
	seq      uint64
	sent     time.Time
	via      string
}

var errNotOurs = errors.New("not a migration message (no mgrt body)")

// parseMessage reads a delivery and checks that its headers, properties
// and padding agree with its body. A delivery that is a migration message
// but was altered returns its info and an error saying what changed.
func parseMessage(d *amqp091.Delivery) (msgInfo, error) {
	b := d.Body
	if len(b) < bodyHeader || [4]byte(b[:4]) != bodyMagic {
		return msgInfo{}, errNotOurs
	}
	m := msgInfo{
		queue:    int(binary.BigEndian.Uint16(b[4:])),
		producer: int(binary.BigEndian.Uint16(b[6:])),
		seq:      binary.BigEndian.Uint64(b[8:]),
		sent:     time.Unix(0, int64(binary.BigEndian.Uint64(b[16:]))),
	}
	if m.producer >= len(producerNames) {
		return msgInfo{}, fmt.Errorf("producer %d in the body is unknown", m.producer)
	}
	via, _ := d.Headers[headerVia].(string)
	m.via = via
	for i := bodyHeader; i < len(b); i++ {
		if b[i] != byte(m.seq*31+uint64(i)) {
			return m, fmt.Errorf("body byte %d altered", i)
		}
	}
	if p, _ := d.Headers[headerProducer].(string); p != producerNames[m.producer] {
		return m, fmt.Errorf("header %s = %q, body says %q", headerProducer, p, producerNames[m.producer])
	}
	if s, ok := d.Headers[headerSeq].(int64); !ok || uint64(s) != m.seq {
		return m, fmt.Errorf("header %s = %v, body says %d", headerSeq, d.Headers[headerSeq], m.seq)
	}
	if via != "rabbitmq" && via != "brokerd" {
		return m, fmt.Errorf("header %s = %q", headerVia, via)
	}
	switch {
	case d.ContentType != contentType, d.AppId != appID, d.Type != msgType:
		return m, fmt.Errorf("properties content-type %q app-id %q type %q altered", d.ContentType, d.AppId, d.Type)
	case d.MessageId != messageID(m.queue, m.producer, m.seq):
		return m, fmt.Errorf("message-id %q altered", d.MessageId)
	case d.DeliveryMode != amqp091.Persistent:
		return m, fmt.Errorf("delivery-mode %d, want 2 (persistent)", d.DeliveryMode)
	case !d.Timestamp.Equal(m.sent.Truncate(time.Second)):
		return m, fmt.Errorf("timestamp %v, sent at %v", d.Timestamp, m.sent)
	}
	return m, nil
}
