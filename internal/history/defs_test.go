package history

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, o DefOp, q string, out Outcome, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: defInput{o, q}, Output: out, Call: call, Return: ret}
}

// The model accepts what one queue table could have answered and refuses
// the rest; an operation with no reply may have happened or not.
func TestDefinitionsModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"declare then check", []porcupine.Operation{op(0, Declare, "q", OK, 0, 1), op(1, Check, "q", OK, 2, 3)}, true},
		{"check misses a declared queue", []porcupine.Operation{op(0, Declare, "q", OK, 0, 1), op(1, Check, "q", NotFound, 2, 3)}, false},
		{"check finds a deleted queue", []porcupine.Operation{
			op(0, Declare, "q", OK, 0, 1), op(0, Delete, "q", OK, 2, 3), op(1, Check, "q", OK, 4, 5)}, false},
		{"concurrent delete may come either side", []porcupine.Operation{
			op(0, Declare, "q", OK, 0, 1), op(0, Delete, "q", OK, 2, 10), op(1, Check, "q", OK, 3, 4), op(2, Check, "q", NotFound, 5, 6)}, true},
		{"unreplied declare may take effect late", []porcupine.Operation{
			op(0, Declare, "q", Unknown, 0, 1<<62), op(1, Check, "q", NotFound, 2, 3), op(1, Check, "q", OK, 4, 5)}, true},
		{"a found queue is not lost again", []porcupine.Operation{
			op(0, Declare, "q", Unknown, 0, 1<<62), op(1, Check, "q", OK, 2, 3), op(1, Check, "q", NotFound, 4, 5)}, false},
		{"queues are apart", []porcupine.Operation{
			op(0, Declare, "a", OK, 0, 1), op(1, Check, "b", NotFound, 2, 3)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(definitionsModel, tc.ops); got != tc.ok {
				t.Fatalf("linearizable = %v, want %v", got, tc.ok)
			}
		})
	}
}

// Recorded calls are checked with their real times.
func TestDefinitionsRecord(t *testing.T) {
	d := NewDefinitions()
	d.Begin(0, Declare, "q").End(OK)
	d.Begin(1, Check, "q").End(OK)
	if ok, err := d.Check(time.Minute); !ok || err != nil {
		t.Fatalf("a sound history: %v %v", ok, err)
	}
	d.Begin(1, Check, "q").End(NotFound)
	if ok, err := d.Check(time.Minute); ok || err != nil {
		t.Fatalf("a queue lost without a delete: linearizable %v, %v", ok, err)
	}
}
