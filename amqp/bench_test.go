package amqp

import (
	"bytes"
	"io"
	"runtime"
	"testing"
)

func BenchmarkDecodeMethod(b *testing.B) {
	for _, c := range []struct {
		name string
		m    Method
	}{
		{"publish", &BasicPublish{Exchange: "amq.topic", RoutingKey: "orders.eu.created"}},
		{"ack", &BasicAck{DeliveryTag: 123456, Multiple: true}},
		{"queue.declare", &QueueDeclare{Queue: "orders", Durable: true, Arguments: Table{{"x-queue-type", "quorum"}, {"x-max-length", int64(100000)}}}},
	} {
		frame := AppendMethodFrame(nil, 1, c.m)
		payload := frame[7 : len(frame)-1]
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, err := DecodeMethod(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAppendDelivery encodes what a broker sends per message to a
// consumer: basic.deliver, content header with raw properties, body.
func BenchmarkAppendDelivery(b *testing.B) {
	props := Properties{Flags: FlagContentType | FlagDeliveryMode | FlagHeaders, ContentType: "application/json", DeliveryMode: 2,
		Headers: Table{{"trace-id", "0af7651916cd43dd8448eb211c80319c"}}}
	raw, _ := props.Append(nil)
	for _, size := range []int{16, 1024, 64 << 10} {
		body := make([]byte, size)
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, size+1024)
			deliver := &BasicDeliver{ConsumerTag: "amq.ctag-1", Exchange: "amq.topic", RoutingKey: "orders.eu.created"}
			b.SetBytes(int64(size))
			for b.Loop() {
				deliver.DeliveryTag++
				buf = AppendMethodFrame(buf[:0], 1, deliver)
				buf = AppendHeaderFrame(buf, 1, ClassBasic, uint64(len(body)), raw)
				buf = AppendBodyFrames(buf, 1, body, 131072)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkReadPublish reads and decodes what a publisher sends per message.
func BenchmarkReadPublish(b *testing.B) {
	props := Properties{Flags: FlagContentType | FlagDeliveryMode, ContentType: "application/json", DeliveryMode: 2}
	raw, _ := props.Append(nil)
	for _, size := range []int{16, 1024, 64 << 10} {
		var stream []byte
		stream = AppendMethodFrame(stream, 1, &BasicPublish{Exchange: "amq.topic", RoutingKey: "orders.eu.created"})
		stream = AppendHeaderFrame(stream, 1, ClassBasic, uint64(size), raw)
		stream = AppendBodyFrames(stream, 1, make([]byte, size), 131072)
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			fr := NewFrameReader(&loopReader{data: stream})
			fr.SetMaxFrameSize(131072)
			for b.Loop() {
				f, err := fr.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeMethod(f.Payload); err != nil {
					b.Fatal(err)
				}
				f, _ = fr.ReadFrame()
				_, _, rp, err := ParseContentHeader(f.Payload)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeProperties(rp); err != nil {
					b.Fatal(err)
				}
				fr.ReadFrame()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func BenchmarkTable(b *testing.B) {
	enc, _ := AppendTable(nil, everyType)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, _, err := DecodeTable(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		buf := make([]byte, 0, len(enc))
		for b.Loop() {
			buf, _ = AppendTable(buf[:0], everyType)
		}
		if !bytes.Equal(buf, enc) {
			b.Fatal("encoding differs")
		}
	})
}

func sizeName(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	default:
		return itoa(n) + "B"
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// BenchmarkDeliverStream queues deliveries of 1 KiB messages on a
// connection as fast as its writer encodes them and sends them over
// loopback TCP, stopping at the high-water mark as a queue's dispatch
// does: the cost per delivery of the sender and the writer together.
func BenchmarkDeliverStream(b *testing.B) {
	c, client := loopConn(b, 131072)
	go io.Copy(io.Discard, client) // ends when loopConn's cleanup closes client
	ch := &serverChannel{c: c, id: 1}
	props := Properties{Flags: FlagDeliveryMode, DeliveryMode: 2}
	raw, _ := props.Append(nil)
	body := make([]byte, 1024)
	deliver := &BasicDeliver{ConsumerTag: "amq.ctag-1", RoutingKey: "q"}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		deliver.DeliveryTag++
		for !c.writable() { // as a consumer's dispatch stops at the high-water mark
			runtime.Gosched()
		}
		c.sendContent(ch, deliver, raw, body)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
