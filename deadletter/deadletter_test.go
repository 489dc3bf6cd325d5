package deadletter

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
)

var t0 = time.Unix(1_700_000_000, 0)

func keys(t amqp.Table) []string {
	var out []string
	for _, f := range t {
		out = append(out, f.Key)
	}
	return out
}

func get(t *testing.T, tab amqp.Table, key string) any {
	t.Helper()
	v, ok := tab.Get(key)
	if !ok {
		t.Fatalf("no %q in %v", key, tab)
	}
	return v
}

func deaths(t *testing.T, p amqp.Properties) []amqp.Table {
	t.Helper()
	arr := get(t, p.Headers, "x-death").([]any)
	out := make([]amqp.Table, len(arr))
	for i, e := range arr {
		out[i] = e.(amqp.Table)
	}
	return out
}

func TestFirstDeath(t *testing.T) {
	src := Source{
		Props: amqp.Properties{
			Flags:      amqp.FlagHeaders | amqp.FlagExpiration | amqp.FlagContentType,
			Headers:    amqp.Table{{Key: "app", Value: "v"}, {Key: "CC", Value: []any{"c1", "c2"}}},
			Expiration: "60000", ContentType: "text/plain",
		},
		Exchange: "ex", RoutingKeys: []string{"rk", "c1", "c2", "b1"},
		Queue: "q", Reason: Expired, Time: t0,
	}
	res := Rewrite(src, Target{Exchange: "dlx"})
	p := res.Props
	if p.Flags&amqp.FlagExpiration != 0 || p.Expiration != "" {
		t.Fatalf("expiration kept: %+v", p)
	}
	if p.ContentType != "text/plain" || get(t, p.Headers, "app") != "v" {
		t.Fatalf("other properties changed: %+v", p)
	}
	ds := deaths(t, p)
	if len(ds) != 1 {
		t.Fatalf("x-death has %d entries", len(ds))
	}
	d := ds[0]
	if want := []string{"original-expiration", "count", "reason", "queue", "time", "exchange", "routing-keys"}; !slices.Equal(keys(d), want) {
		t.Fatalf("x-death keys %v, want %v", keys(d), want)
	}
	want := amqp.Table{
		{Key: "original-expiration", Value: "60000"},
		{Key: "count", Value: int64(1)},
		{Key: "reason", Value: "expired"},
		{Key: "queue", Value: "q"},
		{Key: "time", Value: amqp.Timestamp(t0.Unix())},
		{Key: "exchange", Value: "ex"},
		{Key: "routing-keys", Value: []any{"rk", "c1", "c2"}}, // BCC b1 excluded
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("x-death entry\n got %#v\nwant %#v", d, want)
	}
	for k, v := range map[string]string{
		"x-first-death-reason": "expired", "x-first-death-queue": "q", "x-first-death-exchange": "ex",
		"x-last-death-reason": "expired", "x-last-death-queue": "q", "x-last-death-exchange": "ex",
	} {
		if got := get(t, p.Headers, k); got != v {
			t.Errorf("%s = %v, want %q", k, got, v)
		}
	}
	// Without a dead-letter routing key: all original keys, CC kept.
	if res.Exchange != "dlx" || !slices.Equal(res.RoutingKeys, []string{"rk", "c1", "c2", "b1"}) {
		t.Fatalf("routing = %s %v", res.Exchange, res.RoutingKeys)
	}
	if _, ok := p.Headers.Get("CC"); !ok {
		t.Fatal("CC removed without a dead-letter routing key")
	}
	// The source properties are not modified.
	if _, ok := src.Props.Headers.Get("x-death"); ok {
		t.Fatal("Rewrite modified its input")
	}
}

func TestDeadLetterRoutingKeyRemovesCC(t *testing.T) {
	src := Source{
		Props:    amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{{Key: "CC", Value: []any{"c1"}}}},
		Exchange: "", RoutingKeys: []string{"q", "c1"}, Queue: "q", Reason: Rejected, Time: t0,
	}
	res := Rewrite(src, Target{Exchange: "dlx", RoutingKey: "dead", HasRoutingKey: true})
	if !slices.Equal(res.RoutingKeys, []string{"dead"}) {
		t.Fatalf("keys = %v", res.RoutingKeys)
	}
	if _, ok := res.Props.Headers.Get("CC"); ok {
		t.Fatal("CC kept although the routing key was replaced")
	}
	if rk := get(t, deaths(t, res.Props)[0], "routing-keys"); !reflect.DeepEqual(rk, []any{"q", "c1"}) {
		t.Fatalf("routing-keys = %v", rk)
	}
	if _, ok := deaths(t, res.Props)[0].Get("original-expiration"); ok {
		t.Fatal("original-expiration without an expiration property")
	}
}

func TestRepeatDeathCountsAndMovesToFront(t *testing.T) {
	msg := Source{Props: amqp.Properties{Flags: amqp.FlagExpiration, Expiration: "5"}, Exchange: "x", RoutingKeys: []string{"k"}, Queue: "a", Reason: Rejected, Time: t0}
	r1 := Rewrite(msg, Target{Exchange: "", RoutingKey: "b", HasRoutingKey: true})
	r2 := Rewrite(Source{Props: r1.Props, Exchange: r1.Exchange, RoutingKeys: r1.RoutingKeys, Queue: "b", Reason: Expired, Time: t0.Add(time.Minute)},
		Target{Exchange: "", RoutingKey: "a", HasRoutingKey: true})
	r3 := Rewrite(Source{Props: r2.Props, Exchange: r2.Exchange, RoutingKeys: r2.RoutingKeys, Queue: "a", Reason: Rejected, Time: t0.Add(2 * time.Minute)},
		Target{Exchange: "", RoutingKey: "b", HasRoutingKey: true})
	ds := deaths(t, r3.Props)
	if len(ds) != 2 {
		t.Fatalf("x-death has %d entries: %v", len(ds), ds)
	}
	front := ds[0]
	if get(t, front, "queue") != "a" || get(t, front, "reason") != "rejected" || get(t, front, "count") != int64(2) {
		t.Fatalf("front entry %v", front)
	}
	// First-death values kept on the repeated entry.
	if get(t, front, "time") != amqp.Timestamp(t0.Unix()) || get(t, front, "exchange") != "x" ||
		!reflect.DeepEqual(get(t, front, "routing-keys"), []any{"k"}) || get(t, front, "original-expiration") != "5" {
		t.Fatalf("repeated entry lost its first-death values: %v", front)
	}
	if get(t, ds[1], "queue") != "b" || get(t, ds[1], "count") != int64(1) {
		t.Fatalf("second entry %v", ds[1])
	}
	h := r3.Props.Headers
	if get(t, h, "x-first-death-queue") != "a" || get(t, h, "x-first-death-reason") != "rejected" || get(t, h, "x-first-death-exchange") != "x" {
		t.Fatalf("first-death headers changed: %v", h)
	}
	if get(t, h, "x-last-death-queue") != "a" || get(t, h, "x-last-death-exchange") != "" {
		t.Fatalf("last-death headers: %v", h)
	}
	if want := []Death{{"a", Rejected}, {"b", Expired}}; !slices.Equal(r3.History, want) {
		t.Fatalf("history %v, want %v", r3.History, want)
	}
}

func TestClientXDeath(t *testing.T) {
	// Well formed, with a narrower count type: continued, count becomes a long.
	good := amqp.Table{{Key: "x-death", Value: []any{amqp.Table{
		{Key: "count", Value: int32(4)}, {Key: "reason", Value: "expired"}, {Key: "queue", Value: "q"},
	}}}, {Key: "x-first-death-queue", Value: "orig"}}
	r := Rewrite(Source{Props: amqp.Properties{Flags: amqp.FlagHeaders, Headers: good}, RoutingKeys: []string{"q"}, Queue: "q", Reason: Expired, Time: t0}, Target{})
	ds := deaths(t, r.Props)
	if len(ds) != 1 || get(t, ds[0], "count") != int64(5) {
		t.Fatalf("client x-death not continued: %v", ds)
	}
	if get(t, r.Props.Headers, "x-first-death-queue") != "orig" {
		t.Fatal("first-death header overwritten on a later death")
	}
	// Malformed: replaced, and first-death headers set as for a first death.
	for _, bad := range []any{"nonsense", []any{"not a table"}, int32(3)} {
		h := amqp.Table{{Key: "x-death", Value: bad}, {Key: "x-first-death-queue", Value: "forged"}}
		r := Rewrite(Source{Props: amqp.Properties{Flags: amqp.FlagHeaders, Headers: h}, RoutingKeys: []string{"q"}, Queue: "q", Reason: MaxLen, Time: t0}, Target{})
		ds := deaths(t, r.Props)
		if len(ds) != 1 || get(t, ds[0], "count") != int64(1) || get(t, ds[0], "reason") != "maxlen" {
			t.Fatalf("malformed x-death %v not replaced: %v", bad, ds)
		}
		if get(t, r.Props.Headers, "x-first-death-queue") != "q" {
			t.Fatalf("first-death not reset after malformed x-death %v", bad)
		}
	}
}

func TestIsCycle(t *testing.T) {
	cases := []struct {
		history []Death
		reason  Reason
		target  string
		want    bool
	}{
		{[]Death{{"q", Expired}}, Expired, "q", true},                                     // self-loop on TTL
		{[]Death{{"q", MaxLen}}, MaxLen, "q", true},                                       // self-loop on maxlen
		{[]Death{{"q", Rejected}}, Rejected, "q", false},                                  // rejection never cycles
		{[]Death{{"q", Expired}}, Expired, "other", false},                                // new queue
		{[]Death{{"a3", Expired}, {"a2", Expired}, {"b", Rejected}}, Expired, "b", false}, // rejection inside the loop
		{[]Death{{"a3", Expired}, {"a2", Expired}, {"b", Expired}}, Expired, "b", true},
		{[]Death{{"b", Expired}, {"a", Rejected}, {"b", Expired}}, Expired, "b", true}, // most recent b, no rejection before it
		{nil, Expired, "q", false},
	}
	for i, c := range cases {
		if got := IsCycle(c.history, c.reason, c.target); got != c.want {
			t.Errorf("case %d: IsCycle(%v, %s, %s) = %t, want %t", i, c.history, c.reason, c.target, got, c.want)
		}
	}
}

// The rewritten properties encode and decode back to themselves.
func TestRewriteEncodes(t *testing.T) {
	r := Rewrite(Source{Props: amqp.Properties{Flags: amqp.FlagExpiration, Expiration: "10"}, RoutingKeys: []string{"q"}, Queue: "q", Reason: Expired, Time: t0}, Target{})
	raw, err := r.Props.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := amqp.DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r.Props) {
		t.Fatalf("round trip\n got %#v\nwant %#v", back, r.Props)
	}
}

func FuzzRewrite(f *testing.F) {
	seed, _ := (&amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{{Key: "x-death", Value: []any{amqp.Table{{Key: "queue", Value: "q"}, {Key: "reason", Value: "expired"}}}}}}).Append(nil)
	f.Add(seed, "q", "expired")
	f.Fuzz(func(t *testing.T, raw []byte, queue, reason string) {
		p, err := amqp.DecodeProperties(raw)
		if err != nil {
			return
		}
		r := Rewrite(Source{Props: p, RoutingKeys: []string{"k"}, Queue: queue, Reason: Reason(reason), Time: t0}, Target{Exchange: "x"})
		if len(r.History) == 0 || r.History[0] != (Death{queue, Reason(reason)}) {
			t.Fatalf("history %v does not start with this death", r.History)
		}
		if _, err := r.Props.Append(nil); err != nil {
			t.Fatalf("rewritten properties do not encode: %v", err)
		}
	})
}

// BenchmarkRewrite: a first death (expired, with an application header
// and an expiration), then the same message dying again elsewhere.
func BenchmarkRewrite(b *testing.B) {
	t0 := time.Unix(1700000000, 0)
	first := Source{
		Props:    amqp.Properties{Flags: amqp.FlagExpiration | amqp.FlagHeaders, Expiration: "1000", Headers: amqp.Table{{Key: "app", Value: "orders"}}},
		Exchange: "x", RoutingKeys: []string{"k"}, Queue: "work", Reason: Expired, Time: t0,
	}
	again := first
	again.Props = Rewrite(first, Target{Exchange: "dlx"}).Props
	again.Queue, again.Reason = "retry", Rejected
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Rewrite(first, Target{Exchange: "dlx"})
		}
	})
	b.Run("again", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Rewrite(again, Target{Exchange: "dlx", RoutingKey: "r", HasRoutingKey: true})
		}
	})
}

// LatestDeath reads the first (most recent) x-death entry, strings as
// longstr or bytes; it reports false without one or without its queue.
func TestLatestDeath(t *testing.T) {
	at := amqp.Timestamp(1_700_000_000)
	entry := func(fields ...amqp.Field) amqp.Table { return amqp.Table(fields) }
	full := amqp.Table{{Key: "x-death", Value: []any{
		entry(amqp.Field{Key: "queue", Value: "work"}, amqp.Field{Key: "reason", Value: []byte("rejected")},
			amqp.Field{Key: "exchange", Value: "x"}, amqp.Field{Key: "routing-keys", Value: []any{"k1", []byte("k2"), int32(3)}},
			amqp.Field{Key: "time", Value: at}),
		entry(amqp.Field{Key: "queue", Value: "older"}),
	}}}
	l, ok := LatestDeath(full)
	if !ok || l.Queue != "work" || l.Reason != "rejected" || l.Exchange != "x" ||
		!slices.Equal(l.RoutingKeys, []string{"k1", "k2"}) || !l.Time.Equal(time.Unix(int64(at), 0)) {
		t.Fatalf("full entry: %+v %v", l, ok)
	}
	for name, h := range map[string]amqp.Table{
		"no header":  nil,
		"not array":  {{Key: "x-death", Value: "x"}},
		"empty":      {{Key: "x-death", Value: []any{}}},
		"not table":  {{Key: "x-death", Value: []any{"x"}}},
		"no queue":   {{Key: "x-death", Value: []any{entry(amqp.Field{Key: "reason", Value: "expired"})}}},
		"queue type": {{Key: "x-death", Value: []any{entry(amqp.Field{Key: "queue", Value: int32(1)})}}},
	} {
		if l, ok := LatestDeath(h); ok {
			t.Errorf("%s: %+v reported as a death", name, l)
		}
	}
}
