// Tests of dead-lettering set by policy against queue arguments.

package broker_test

// Tests of dead-lettering set by policy (SPEC §2, reference P5): policy
// against queue arguments, key by key, and what a policy DLX needs (no
// argument routing key, no write permission).

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func dsPolicy(e *dsEnv) {
	e.queue("src", nil)
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx", nil)
	e.PublishBodies("src", "p1", "p2")
	e.waitFor("src", 2, 2, 0)
	ds := e.Expect("src", "p1", "p2")
	e.nack(ds[0], false, false)
	e.waitFor("src", 1, 0, 1)
	e.wantCounters(map[string]uint64{"discarded.rejected": 1, "dropped.no_dlx": 1})
	e.policy(broker.Policy{Name: "dlx", Pattern: "^src$", ApplyTo: "queues",
		Definition: map[string]any{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "dlq"}})
	if st, _ := e.b.Broker.QueueStats("/", "src"); st.Policy != "dlx" || st.OperatorPolicy != "" ||
		fmt.Sprint(st.EffectivePolicyDefinition) != "map[dead-letter-exchange:dlx dead-letter-routing-key:dlq]" {
		e.t.Fatalf("policy %q, operator policy %q, effective definition %v applied; want dlx, none, the policy's",
			st.Policy, st.OperatorPolicy, st.EffectivePolicyDefinition)
	}
	e.nack(ds[1], false, false)
	d := e.Expect("dlq", "p2")[0]
	e.WantEmpty("dlq")
	dsWantRoute(e.t, d, "dlx", "dlq")
	e.waitFor("src", 0, 0, 0)
	e.wantCounters(map[string]uint64{"discarded.rejected": 1, "dropped.no_dlx": 1, "dead_lettered.rejected": 1})
}

// dsOverridePolicy: arguments win over a policy (set before declare) that
// would loop the message back to the source.
func dsOverridePolicy(e *dsEnv) {
	e.policy(broker.Policy{Name: "loop", Pattern: "^src$", ApplyTo: "queues",
		Definition: map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "src"}})
	e.setup(nil)
	dsArgumentsWin(e)
}

// dsIgnorePolicy is dsOverridePolicy with the policy set after declare.
func dsIgnorePolicy(e *dsEnv) {
	e.setup(nil)
	e.policy(broker.Policy{Name: "loop", Pattern: "^src$", ApplyTo: "queues",
		Definition: map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "src"}})
	dsArgumentsWin(e)
}

func dsArgumentsWin(e *dsEnv) {
	// The policy applies (and shows), but the arguments win key by key.
	if st, _ := e.b.Broker.QueueStats("/", "src"); st.Policy != "loop" {
		e.t.Fatalf("policy %q applied, want loop", st.Policy)
	}
	e.PublishBodies("src", "p1")
	e.nack(e.Expect("src", "p1")[0], false, false)
	d := e.Expect("dlq", "p1")[0]
	dsWantRoute(e.t, d, "dlx", "dlq")
	e.WantEmpty("dlq")
	e.waitFor("src", 0, 0, 0)
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1})
}

// TestDLXRoutingKeyNeedsArgumentDLX: x-dead-letter-routing-key needs
// x-dead-letter-exchange among the arguments; a policy DLX does not count.
// A policy routing key needs no policy DLX, and without any DLX does
// nothing.
func TestDLXRoutingKeyNeedsArgumentDLX(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.policy(broker.Policy{Name: "dlx", Pattern: "^q$", Definition: map[string]any{"dead-letter-exchange": ""}})
	rqFails(t, e.Conn, 406, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined",
		func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("q", true, false, false, false, amqp091.Table{"x-dead-letter-routing-key": "dlq"})
			return err
		})
	if _, ok := e.b.Broker.QueueStats("/", "q"); ok {
		t.Fatal("queue q created despite the error")
	}

	e.Declare("dlq", nil, brokertest.Durable)
	e.queue("other", nil)
	e.policy(broker.Policy{Name: "dlrk", Pattern: "^other$", Definition: map[string]any{"dead-letter-routing-key": "dlq"}})
	e.PublishBodies("other", "p")
	e.reject(e.Expect("other", "p")[0], false)
	e.WantEmpty("dlq")
	e.wantCounters(map[string]uint64{"discarded.rejected": 1, "dropped.no_dlx": 1})
}

// TestDLXArgumentAndPolicyKeyByKey: an argument overrules the policy key by
// key (P5): the argument's DLX with the policy's routing key.
func TestDLXArgumentAndPolicyKeyByKey(t *testing.T) {
	for _, g := range dsGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			e := dsStart(t, g, brokertest.Config{})
			e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
			e.DeclareExchange("other", "fanout", nil, brokertest.Durable)
			e.Declare("dlq", nil, brokertest.Durable)
			e.Declare("wrong", nil, brokertest.Durable)
			e.Bind("dlq", "dlq", "dlx", nil)
			e.Bind("wrong", "", "other", nil)
			e.policy(broker.Policy{Name: "p", Pattern: "^src$", ApplyTo: "queues",
				Definition: map[string]any{"dead-letter-exchange": "other", "dead-letter-routing-key": "dlq"}})
			e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
			e.PublishBodies("src", "p")
			e.reject(e.Expect("src", "p")[0], false)
			dsWantRoute(t, e.Expect("dlq", "p")[0], "dlx", "dlq")
			e.WantEmpty("wrong")
			// Clearing the policy: the queue's own key (the publish key,
			// src) routes nowhere on dlx.
			if err := e.b.Broker.ClearPolicy("/", "p"); err != nil {
				t.Fatal(err)
			}
			e.PublishBodies("src", "p2")
			e.reject(e.Expect("src", "p2")[0], false)
			e.WantEmpty("dlq")
			e.WantEmpty("wrong")
		})
	}
}

// TestDLXPolicyDLXNotPermissionChecked: a DLX set by policy needs no write
// permission on it, at declare or when dead-lettering (B63; the argument
// case is TestPermissionsDeadLetterExchange).
func TestDLXPolicyDLXNotPermissionChecked(t *testing.T) {
	// d may write to the default exchange, not to dlx.
	b := rqStartUsers(t, map[string][3]string{"d": {"^d-", "^(d-.*|amq\\.default)$", "^d-"}})
	admin := brokertest.NewSession(t, b.Dial(t))
	admin.DeclareExchange("dlx", "direct", nil)
	admin.Declare("dlq", nil)
	admin.Bind("dlq", "dlq", "dlx", nil)
	if err := b.Broker.SetPolicy("/", broker.Policy{Name: "dlx", Pattern: "^d-q$",
		Definition: map[string]any{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "dlq"}}); err != nil {
		t.Fatal(err)
	}
	ch := brokertest.NewSession(t, rqDialAs(t, b, "d"))
	if _, err := ch.QueueDeclare("d-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies("d-q", "p")
	d, ok, err := ch.Channel.Get("d-q", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	// A round trip on ch: the reject has been handled.
	if _, err := ch.QueueDeclarePassive("d-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	rqExpect(t, admin, map[string][]string{"dlq": {"p"}})
}
