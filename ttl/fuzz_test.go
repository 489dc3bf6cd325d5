package ttl

import (
	"math/rand/v2"
	"testing"
)

// FuzzWheel drives the wheel with random operations (adds with past, near, boundary, far
// and extreme deadlines; removes; advances by 0, small, boundary, huge and backwards
// amounts; adds and removes from inside fire) against a map model: every Advance must fire
// exactly the timers due by then, each once, none early, in deadline order, and Len and
// NextDeadline must agree with the model.
func FuzzWheel(f *testing.F) {
	for _, s := range seedCorpus() {
		f.Add(s.start, s.ops)
	}
	f.Fuzz(func(t *testing.T, start int64, ops []byte) {
		if len(ops) > 1024 { // longer runs add little and slow down minimization
			ops = ops[:1024]
		}
		runWheelModel(t, start, ops)
	})
}

// TestWheelModel runs the model with pseudo-random op streams, so that plain `go test`
// covers what the fuzzer does.
func TestWheelModel(t *testing.T) {
	for _, s := range seedCorpus() {
		runWheelModel(t, s.start, s.ops)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	starts := []int64{0, 1_750_000_000_000, -1, 1<<48 - 3, 1 << 62, -(1 << 62)}
	for i := range 2000 {
		ops := make([]byte, 50+rng.IntN(600))
		for j := range ops {
			ops[j] = byte(rng.Uint32())
		}
		start := starts[i%len(starts)]
		if i%5 == 0 {
			start = int64(rng.Uint64())
		}
		runWheelModel(t, start, ops)
	}
}
