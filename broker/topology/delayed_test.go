package topology

import (
	"slices"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
)

// TestValidateDelayed: the plugin's validate/1, code by code.
func TestValidateDelayed(t *testing.T) {
	for _, tc := range []struct {
		args amqp.Table
		code uint16 // 0: valid
	}{
		{amqp.Table{{Key: "x-delayed-type", Value: "direct"}}, 0},
		{amqp.Table{{Key: "x-delayed-type", Value: "topic"}}, 0},
		{amqp.Table{{Key: "x-delayed-type", Value: "fanout"}}, 0},
		{amqp.Table{{Key: "x-delayed-type", Value: "headers"}}, 0},
		{nil, amqp.PreconditionFailed},
		{amqp.Table{{Key: "x-delayed-type", Value: []byte("direct")}}, 0},
		{amqp.Table{{Key: "x-delayed-type", Value: int32(1)}}, amqp.PreconditionFailed},
		{amqp.Table{{Key: "x-delayed-type", Value: "x-delayed-message"}}, amqp.PreconditionFailed},
		{amqp.Table{{Key: "x-delayed-type", Value: "x-consistent-hash"}}, amqp.CommandInvalid},
		{amqp.Table{{Key: "x-delayed-type", Value: ""}}, amqp.CommandInvalid},
	} {
		err := ValidateDelayed(tc.args)
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%v: %v, want valid", tc.args, err)
		case tc.code != 0 && (err == nil || err.Code != tc.code):
			t.Errorf("%v: %v, want code %d", tc.args, err, tc.code)
		}
	}
}

// TestRouteDelayed: a delayed exchange routes as its x-delayed-type, and
// a held message stops at the first delayed exchange on each path (its
// holding queue is the target) without reaching its alternate exchange,
// while other paths go on.
func TestRouteDelayed(t *testing.T) {
	top := New("/")
	q := func(name string) *queue.Queue {
		return queue.New(nil, &queue.Host{Name: "/"}, 0, name, false, false, false, nil)
	}
	hold := q("hold")
	qa, qb, qae, qother := q("a"), q("b"), q("ae"), q("other")
	dx := NewExchange("dx", TypeDelayed, false, false, false, amqp.Table{{Key: "x-delayed-type", Value: "topic"}, {Key: "alternate-exchange", Value: "ae"}})
	dx.Hold = hold
	ae := NewExchange("ae", "fanout", false, false, false, nil)
	front := NewExchange("front", "fanout", false, false, false, nil)
	for _, x := range []*Exchange{dx, ae, front} {
		top.Exchanges[x.Name] = x
	}
	dx.AddBinding(&Binding{Source: "dx", Key: "a.*", Queue: qa})
	dx.AddBinding(&Binding{Source: "dx", Key: "#.b", Queue: qb})
	ae.AddBinding(&Binding{Source: "ae", Queue: qae})
	front.AddBinding(&Binding{Source: "front", Exchange: dx})
	front.AddBinding(&Binding{Source: "front", Queue: qother})
	names := func(qs []*queue.Queue) []string {
		var out []string
		for _, q := range qs {
			out = append(out, q.Name)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		x    *Exchange
		key  string
		held bool
		want []string
	}{
		{dx, "a.b", false, []string{"a", "b"}},
		{dx, "x.y", false, []string{"ae"}},
		{dx, "a.b", true, []string{"hold"}},
		{dx, "x.y", true, []string{"hold"}},
		{front, "a.c", false, []string{"a", "other"}},
		{front, "a.c", true, []string{"hold", "other"}},
	} {
		var got []*queue.Queue
		if tc.held {
			got = top.RouteHeldInto(nil, tc.x, []string{tc.key}, nil)
		} else {
			got = top.RouteInto(nil, tc.x, []string{tc.key}, nil)
		}
		if !slices.Equal(names(got), tc.want) {
			t.Errorf("%s %q held=%v: %v, want %v", tc.x.Name, tc.key, tc.held, names(got), tc.want)
		}
	}
	if err := ValidateBinding(dx, amqp.Table{{Key: "x-match", Value: "bad"}}); err != nil {
		t.Errorf("a topic-typed delayed exchange checked x-match: %v", err)
	}
	bx := NewExchange("bx", TypeDelayed, false, false, false, amqp.Table{{Key: "x-delayed-type", Value: []byte("fanout")}})
	bx.AddBinding(&Binding{Source: "bx", Key: "ignored", Queue: qa})
	if got := names(top.RouteInto(nil, bx, []string{"any"}, nil)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a delayed exchange of x-delayed-type fanout (a byte array) routed to %v, want [a]", got)
	}
	hx := NewExchange("hx", TypeDelayed, false, false, false, amqp.Table{{Key: "x-delayed-type", Value: "headers"}})
	if err := ValidateBinding(hx, amqp.Table{{Key: "x-match", Value: "bad"}}); err == nil {
		t.Error("a headers-typed delayed exchange took x-match=bad")
	}
}
