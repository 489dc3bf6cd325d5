// Tests of heartbeats.

package broker_test

// Tests of heartbeats: a silent client is dropped, the server sends them,
// and a client's heartbeats keep an idle connection alive.

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func prHeartbeatBroker(t *testing.T) *brokertest.Instance {
	return brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: time.Second}})
}

func prTuneHeartbeat(hb uint16) rawOpts {
	return rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
		return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: tu.FrameMax, Heartbeat: hb}
	}}
}

func TestHeartbeatSilentClientDropped(t *testing.T) {
	t.Parallel()
	b := prHeartbeatBroker(t)
	// A bystander without heartbeats: amqp091 cannot turn off heartbeats
	// the server proposes, and 1 s ones are fragile on a loaded machine.
	quiet := dialRaw(t, b.Addr)
	quiet.handshake(prTuneHeartbeat(0))
	r := dialRaw(t, b.Addr)
	r.handshake(prTuneHeartbeat(1))
	// Two missed 1 s intervals: dropped after about 2 s.
	took := r.expectHangup(6 * time.Second)
	if took < 1500*time.Millisecond {
		t.Fatalf("silent client dropped after %v, before two heartbeat intervals", took)
	}
	t.Logf("silent client dropped after %v", took)
	// The client that turned heartbeats off in tune-ok, idle as long, was
	// neither sent heartbeats nor timed out.
	if f, err := quiet.next(300 * time.Millisecond); !rawIsTimeout(err) {
		t.Fatalf("client without heartbeats: frame type %d, err %v; want silence", f.Type, err)
	}
	quiet.openChannel(1)
}

func TestHeartbeatServerSends(t *testing.T) {
	t.Parallel()
	b := prHeartbeatBroker(t)
	r := dialRaw(t, b.Addr)
	r.start()
	r.startOk(rawOpts{})
	tune, _ := r.tune(prTuneHeartbeat(1))
	if tune.Heartbeat != 1 {
		t.Fatalf("server proposed heartbeat %d, want 1", tune.Heartbeat)
	}
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	rawExpect[*amqp.ConnectionOpenOk](r, 0)
	f, err := r.next(2 * time.Second)
	if err != nil {
		t.Fatalf("no frame within 2s of an idle connection: %v", err)
	}
	if f.Type != amqp.FrameHeartbeat || f.Channel != 0 || len(f.Payload) != 0 {
		t.Fatalf("got frame type %d channel %d payload %d bytes, want a heartbeat", f.Type, f.Channel, len(f.Payload))
	}
}

func TestHeartbeatClientKeepsAlive(t *testing.T) {
	t.Parallel()
	// Heartbeats every quarter interval, for more than two intervals.
	t.Run("raw", func(t *testing.T) {
		t.Parallel()
		b := prHeartbeatBroker(t)
		r := dialRaw(t, b.Addr)
		r.handshake(prTuneHeartbeat(1))
		received := 0
		for end := time.Now().Add(4500 * time.Millisecond); time.Now().Before(end); {
			r.mustWrite(amqp.AppendHeartbeat(nil))
			f, err := r.next(250 * time.Millisecond)
			switch {
			case err == nil && f.Type == amqp.FrameHeartbeat:
				received++
			case err == nil:
				t.Fatalf("unexpected frame type %d on an idle connection", f.Type)
			case !rawIsTimeout(err):
				t.Fatalf("heartbeating client dropped: %v", err)
			}
		}
		if received < 2 {
			t.Errorf("%d heartbeats from the server in 4.5s, want at least 2", received)
		}
		r.openChannel(1)
	})
	// amqp091 gives up on the server after 1.5 intervals of silence, so
	// it gets 2 s heartbeats here, and is left idle for more than two.
	t.Run("amqp091", func(t *testing.T) {
		t.Parallel()
		b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: 2 * time.Second}})
		c, err := amqp091.DialConfig(b.URL, amqp091.Config{Heartbeat: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Config.Heartbeat != 2*time.Second {
			t.Fatalf("negotiated heartbeat %v, want 2s", c.Config.Heartbeat)
		}
		closed := c.NotifyClose(make(chan *amqp091.Error, 1))
		select {
		case e := <-closed:
			t.Fatalf("connection closed while heartbeating: %v", e)
		case <-time.After(5 * time.Second):
		}
		ch, err := c.Channel()
		if err != nil {
			t.Fatalf("channel after 5s idle: %v", err)
		}
		if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
			t.Fatal(err)
		}
	})
}
