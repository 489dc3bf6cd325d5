package queue

import (
	"testing"

	"github.com/brokerd/brokerd/amqp"
)

// resolveRetry combines arguments and policy as retry.go documents, and
// delay follows each shape, saturating instead of overflowing.
func TestResolveRetryAndDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   amqp.Table
		pol    map[string]any
		counts []uint32
		want   []int64 // delays; nil: retry off
	}{
		{"off", nil, nil, []uint32{1}, nil},
		{"type without min", amqp.Table{{Key: "x-delayed-retry-type", Value: "all"}}, nil, []uint32{1}, nil},
		{"min 0 disables", amqp.Table{{Key: "x-delayed-retry-min", Value: int64(0)}}, nil, []uint32{1}, nil},
		{"type disabled", amqp.Table{{Key: "x-delayed-retry-type", Value: "disabled"}, {Key: "x-delayed-retry-min", Value: int64(5)}}, nil, []uint32{1}, nil},
		{"rabbitmq", amqp.Table{{Key: "x-delayed-retry-type", Value: "all"}, {Key: "x-delayed-retry-min", Value: int64(1000)},
			{Key: "x-delayed-retry-max", Value: int64(2500)}}, nil, []uint32{0, 1, 2, 3, 9}, []int64{1000, 1000, 2000, 2500, 2500}},
		{"rabbitmq no max", amqp.Table{{Key: "x-delayed-retry-type", Value: "failed"}, {Key: "x-delayed-retry-min", Value: int64(300)}},
			nil, []uint32{1, 5}, []int64{300, 300}},
		{"lavinmq uncapped", amqp.Table{{Key: "x-delayed-retry-min", Value: int64(200)}}, nil, []uint32{1, 10, 1 << 31},
			[]int64{200, 2000, MaxExpiration}},
		{"exponential saturates", amqp.Table{{Key: "x-delayed-retry-min", Value: int64(500)}, {Key: "x-delayed-retry-multiplier", Value: int64(2)}},
			nil, []uint32{1, 2, 4, 200}, []int64{500, 1000, 4000, MaxExpiration}},
		{"policy type wins, smaller min and max", amqp.Table{{Key: "x-delayed-retry-type", Value: "all"}, {Key: "x-delayed-retry-min", Value: int64(300)},
			{Key: "x-delayed-retry-max", Value: int64(10000)}},
			map[string]any{"delayed-retry-type": "disabled", "delayed-retry-min": 1000}, []uint32{1}, nil},
		{"policy smaller", amqp.Table{{Key: "x-delayed-retry-min", Value: int64(300)}, {Key: "x-delayed-retry-max", Value: int64(10000)}},
			map[string]any{"delayed-retry-type": "all", "delayed-retry-min": float64(1000), "delayed-retry-max": float64(1500)},
			[]uint32{1, 4, 6}, []int64{300, 1200, 1500}},
	} {
		c := resolveRetry(tc.args, tc.pol)
		if tc.want == nil {
			if c.enabled() {
				t.Errorf("%s: enabled %+v, want off", tc.name, c)
			}
			continue
		}
		for i, n := range tc.counts {
			if got := c.delay(n, 0); got != tc.want[i] {
				t.Errorf("%s: delay(%d) = %d, want %d (%+v)", tc.name, n, got, tc.want[i], c)
			}
		}
	}
	// Jitter: the delay drawn from [delay × (1 - j), delay].
	c := retryConfig{kind: retryAll, min: 1000, max: 1000, jitter: 0.25}
	if lo, hi := c.delay(1, 0.9999999), c.delay(1, 0); lo != 751 || hi != 1000 {
		t.Errorf("jitter 0.25 of 1000: %d to %d, want 751 to 1000", lo, hi)
	}
}
