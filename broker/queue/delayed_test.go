package queue

import (
	"math"
	"testing"

	"github.com/brokerd/brokerd/amqp"
)

// TestDueAt: which headers hold a message on a delayed exchange and until
// when — x-delay as the plugin reads it, x-delivery-time absolute and
// winning when it parses, nothing due now or past or over MaxDelay held.
func TestDueAt(t *testing.T) {
	const now = int64(1_700_000_000_000)
	clock := func() int64 { return now }
	for _, tc := range []struct {
		name string
		h    amqp.Table
		due  int64 // 0: routed at once
	}{
		{"no headers", nil, 0},
		{"other headers", amqp.Table{{Key: "a", Value: int64(5)}}, 0},
		{"long", amqp.Table{{Key: "x-delay", Value: int64(5)}}, now + 5},
		{"int", amqp.Table{{Key: "x-delay", Value: int32(5)}}, now + 5},
		{"uint", amqp.Table{{Key: "x-delay", Value: uint32(5)}}, now + 5},
		{"short", amqp.Table{{Key: "x-delay", Value: int16(5)}}, now + 5},
		{"ushort", amqp.Table{{Key: "x-delay", Value: uint16(5)}}, now + 5},
		{"ubyte", amqp.Table{{Key: "x-delay", Value: uint8(5)}}, now + 5},
		{"byte (not the plugin's)", amqp.Table{{Key: "x-delay", Value: int8(5)}}, 0},
		{"longstr", amqp.Table{{Key: "x-delay", Value: "5"}}, now + 5},
		{"longstr signed", amqp.Table{{Key: "x-delay", Value: "+5"}}, now + 5},
		{"bytes", amqp.Table{{Key: "x-delay", Value: []byte("5")}}, now + 5},
		{"longstr not a number", amqp.Table{{Key: "x-delay", Value: "5ms"}}, 0},
		{"longstr decimal", amqp.Table{{Key: "x-delay", Value: "5.5"}}, 0},
		{"double truncated", amqp.Table{{Key: "x-delay", Value: 5.9}}, now + 5},
		{"float truncated", amqp.Table{{Key: "x-delay", Value: float32(5.9)}}, now + 5},
		{"double under 1", amqp.Table{{Key: "x-delay", Value: 0.9}}, 0},
		{"NaN", amqp.Table{{Key: "x-delay", Value: math.NaN()}}, 0},
		{"Inf", amqp.Table{{Key: "x-delay", Value: math.Inf(1)}}, 0},
		{"huge double", amqp.Table{{Key: "x-delay", Value: 1e300}}, 0},
		{"bool", amqp.Table{{Key: "x-delay", Value: true}}, 0},
		{"timestamp", amqp.Table{{Key: "x-delay", Value: amqp.Timestamp(5)}}, 0},
		{"zero", amqp.Table{{Key: "x-delay", Value: int64(0)}}, 0},
		{"negative", amqp.Table{{Key: "x-delay", Value: int64(-5)}}, 0},
		{"MaxDelay", amqp.Table{{Key: "x-delay", Value: int64(MaxDelay)}}, now + MaxDelay},
		{"over MaxDelay", amqp.Table{{Key: "x-delay", Value: int64(MaxDelay + 1)}}, 0},
		{"max int64", amqp.Table{{Key: "x-delay", Value: int64(math.MaxInt64)}}, 0},
		{"delivery time", amqp.Table{{Key: "x-delivery-time", Value: now + 7}}, now + 7},
		{"delivery time int", amqp.Table{{Key: "x-delivery-time", Value: int32(7)}}, 0},
		{"delivery time string", amqp.Table{{Key: "x-delivery-time", Value: "1700000000007"}}, now + 7},
		{"delivery time now", amqp.Table{{Key: "x-delivery-time", Value: now}}, 0},
		{"delivery time past", amqp.Table{{Key: "x-delivery-time", Value: now - 1}}, 0},
		{"delivery time at MaxDelay", amqp.Table{{Key: "x-delivery-time", Value: now + MaxDelay}}, now + MaxDelay},
		{"delivery time over MaxDelay", amqp.Table{{Key: "x-delivery-time", Value: now + MaxDelay + 1}}, 0},
		{"delivery time wins", amqp.Table{{Key: "x-delay", Value: int64(5)}, {Key: "x-delivery-time", Value: now + 7}}, now + 7},
		{"past delivery time wins", amqp.Table{{Key: "x-delay", Value: int64(5)}, {Key: "x-delivery-time", Value: now - 7}}, 0},
		{"bad delivery time: x-delay", amqp.Table{{Key: "x-delay", Value: int64(5)}, {Key: "x-delivery-time", Value: "soon"}}, now + 5},
		{"delivery time double: x-delay", amqp.Table{{Key: "x-delay", Value: int64(5)}, {Key: "x-delivery-time", Value: float64(now + 7)}}, now + 5},
	} {
		due, held := DueAt(tc.h, clock)
		if held != (tc.due != 0) || (held && due != tc.due) {
			t.Errorf("%s: DueAt = %d, %v; want %d, %v", tc.name, due, held, tc.due, tc.due != 0)
		}
	}
}

// TestHoldName: the holding queue's name maps to its exchange and back,
// one to one, and no client's queue name maps to an exchange.
func TestHoldName(t *testing.T) {
	for _, x := range []string{"x", "", "amq.delayed/y", "a/b", "\x00"} {
		got, ok := HoldExchange(HoldName(x))
		if !ok || got != x {
			t.Errorf("HoldExchange(HoldName(%q)) = %q, %v", x, got, ok)
		}
	}
	for _, q := range []string{"q", "amq.gen-abc", "amq.delayed", "delayed/x"} {
		if x, ok := HoldExchange(q); ok {
			t.Errorf("HoldExchange(%q) = %q, a holding queue's", q, x)
		}
	}
}

// TestReadAheadAt: an entry is read at least readAheadMS before its
// deadline and less than readAheadMS+readBatchMS before it, at a multiple
// of readBatchMS, so the deadlines of one span are read together; the
// extremes of the range do not overflow.
func TestReadAheadAt(t *testing.T) {
	for _, c := range []struct{ deadline, want int64 }{
		{1_700_000_001_000, 1_700_000_000_900},
		{1_700_000_001_049, 1_700_000_000_900},
		{1_700_000_001_050, 1_700_000_000_950},
		{1_700_000_000_999, 1_700_000_000_850},
		{100, 0},
		{99, -50},
		{0, -100},
		{-1, -150},
		{math.MinInt64, math.MinInt64},
		{math.MinInt64 + 99, math.MinInt64},
		{math.MaxInt64, math.MaxInt64 - 100 - (math.MaxInt64-100)%50},
	} {
		if got := readAheadAt(c.deadline); got != c.want {
			t.Errorf("readAheadAt(%d) = %d, want %d", c.deadline, got, c.want)
		}
	}
}
