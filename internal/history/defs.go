package history

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// DefOp is a definition operation a client made on a queue.
type DefOp int

const (
	// Declare is queue.declare (not passive): the queue exists after it.
	Declare DefOp = iota
	// Check is a passive queue.declare: it finds the queue or not.
	Check
	// Delete is queue.delete: the queue does not exist after it.
	Delete
)

// Outcome is what a client learnt of its operation.
type Outcome int

const (
	// OK: the broker replied with success (declare-ok, delete-ok, or a
	// passive declare that found the queue).
	OK Outcome = iota
	// NotFound: a passive declare answered 404 NOT_FOUND.
	NotFound
	// Unknown: no reply (the connection or the node died first): the
	// operation may have taken effect at any time after it began.
	Unknown
)

// Definitions records queue declarations, checks and deletions as clients
// made and saw them, and checks that the broker's answers are
// linearizable: some order of the operations, each placed between its
// call and its reply, explains every answer, as if one queue table had
// served them one at a time. Safe for concurrent use.
type Definitions struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

// NewDefinitions returns an empty history.
func NewDefinitions() *Definitions { return &Definitions{start: time.Now()} }

// Call is one operation under way.
type Call struct {
	d      *Definitions
	client int
	in     defInput
	call   int64
}

type defInput struct {
	op    DefOp
	queue string
}

// Begin records that client starts op on queue; End records the reply.
func (d *Definitions) Begin(client int, op DefOp, queue string) *Call {
	return &Call{d: d, client: client, in: defInput{op, queue}, call: time.Since(d.start).Nanoseconds()}
}

// End records what the client learnt.
func (c *Call) End(out Outcome) {
	ret := time.Since(c.d.start).Nanoseconds()
	if out == Unknown {
		ret = math.MaxInt64 // it may take effect at any time after its call
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.d.ops = append(c.d.ops, porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.call, Output: out, Return: ret})
}

// definitionsModel is one queue's existence, each queue apart.
var definitionsModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byQueue := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range h {
			q := op.Input.(defInput).queue
			if byQueue[q] == nil {
				names = append(names, q)
			}
			byQueue[q] = append(byQueue[q], op)
		}
		out := make([][]porcupine.Operation, 0, len(names))
		for _, q := range names {
			out = append(out, byQueue[q])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		exists, in, out := state.(bool), input.(defInput), output.(Outcome)
		switch in.op {
		case Declare:
			return out != NotFound, true
		case Delete:
			return out != NotFound, false
		default: // Check
			switch out {
			case OK:
				return exists, exists
			case NotFound:
				return !exists, exists
			}
			return true, exists
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(defInput)
		return fmt.Sprintf("%s(%q) -> %v", [...]string{"declare", "check", "delete"}[in.op], in.queue, output)
	},
}

// Check reports whether the recorded history is linearizable; an error
// when the check could not finish within timeout.
func (d *Definitions) Check(timeout time.Duration) (bool, error) {
	d.mu.Lock()
	ops := append([]porcupine.Operation(nil), d.ops...)
	d.mu.Unlock()
	switch porcupine.CheckOperationsTimeout(definitionsModel, ops, timeout) {
	case porcupine.Ok:
		return true, nil
	case porcupine.Illegal:
		return false, nil
	}
	return false, fmt.Errorf("history: %d definition operations not checked within %v", len(ops), timeout)
}
