package history

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Each rule catches the history that breaks it, and only that one.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events func(r *Recorder)
		checks Checks
		want   string // a substring of the one violation; "" for none
	}{
		{"sound", func(r *Recorder) {
			r.Published("a")
			r.Published("b")
			r.Confirmed("a")
			r.Confirmed("b")
			r.Delivered("q", "a", false)
			r.Delivered("q", "a", true) // redelivered after a failover: allowed
			r.Delivered("q", "b", false)
		}, Checks{Ordered: []string{"q"}}, ""},
		{"nacked and never delivered", func(r *Recorder) {
			r.Published("a")
			r.Nacked("a")
		}, Checks{}, ""},
		{"lost", func(r *Recorder) {
			r.Published("a")
			r.Confirmed("a")
		}, Checks{}, `lost: "a"`},
		{"phantom", func(r *Recorder) {
			r.Delivered("q", "x", false)
		}, Checks{}, `phantom: "x"`},
		{"silent duplicate", func(r *Recorder) {
			r.Published("a")
			r.Delivered("q", "a", false)
			r.Delivered("q", "a", false)
		}, Checks{}, `silent duplicate: "a"`},
		{"the same message from two queues is two copies", func(r *Recorder) {
			r.Published("a")
			r.Delivered("q1", "a", false)
			r.Delivered("q2", "a", false)
		}, Checks{}, ""},
		{"duplicate dead letter", func(r *Recorder) {
			r.Published("a")
			r.Confirmed("a")
			r.Delivered("q", "a", false)
			r.Delivered("dlq1", "a", false)
			r.Delivered("dlq2", "a", false)
		}, Checks{DeadLetterQueues: []string{"dlq1", "dlq2"}, MustDie: []string{"a"}}, `duplicate dead letter: "a"`},
		{"dead letter redelivered in its queue", func(r *Recorder) {
			r.Published("a")
			r.Delivered("dlq1", "a", false)
			r.Delivered("dlq1", "a", true)
		}, Checks{DeadLetterQueues: []string{"dlq1", "dlq2"}, MustDie: []string{"a"}}, ""},
		{"dead letter lost", func(r *Recorder) {
			r.Published("a")
			r.Confirmed("a")
			r.Delivered("q", "a", false)
		}, Checks{DeadLetterQueues: []string{"dlq"}, MustDie: []string{"a"}}, `dead letter lost: "a"`},
		{"order", func(r *Recorder) {
			r.Published("a")
			r.Published("b")
			r.Delivered("q", "b", false)
			r.Delivered("q", "a", false)
		}, Checks{Ordered: []string{"q"}}, `order: "a"`},
		{"order of another queue is not checked", func(r *Recorder) {
			r.Published("a")
			r.Published("b")
			r.Delivered("q", "b", false)
			r.Delivered("q", "a", false)
		}, Checks{Ordered: []string{"other"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New()
			tc.events(r)
			rep := r.Check(tc.checks)
			switch {
			case tc.want == "" && !rep.OK():
				t.Fatalf("violations in a sound history: %v", rep)
			case tc.want != "" && (len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], tc.want)):
				t.Fatalf("violations %q, want exactly one with %q", rep.Violations, tc.want)
			}
		})
	}
}

// The report's summary line names the counts.
func TestReportString(t *testing.T) {
	r := New()
	r.Published("a")
	r.Confirmed("a")
	r.Delivered("q", "a", false)
	if got := r.Check(Checks{}).String(); !strings.HasPrefix(got, "1 published, 1 confirmed, 0 nacked, 1 deliveries: 0 lost") {
		t.Fatalf("report %q", got)
	}
}

// A silent duplicate's violation tells the message's story: its publish
// and confirm, and each of its deliveries from that queue in order, with
// its flag, time, label and when its consumer asked.
func TestSilentDuplicateStory(t *testing.T) {
	r := New()
	r.Published("a")
	r.Confirmed("a")
	asked := time.Now()
	r.RecordDelivery("q", Delivery{ID: "a", Via: "c0 session 1 via n2 tag 7 requeue", NotBefore: asked})
	r.Delivered("other", "a", false)
	r.RecordDelivery("q", Delivery{ID: "a", Redelivered: true, Via: "c1 session 1 via n1 tag 3 ack"})
	r.RecordDelivery("q", Delivery{ID: "a", Via: "drain via n3"})
	rep := r.Check(Checks{})
	if len(rep.Violations) != 1 {
		t.Fatalf("violations %q, want one", rep.Violations)
	}
	tm := `\d\d:\d\d:\d\d\.\d\d\d`
	want := `^silent duplicate: "a" delivered again from "q" without redelivered \(a second time\); published ` + tm + `, confirmed ` + tm +
		`; deliveries from "q": #1 ` + tm + ` redelivered=false \(c0 session 1 via n2 tag 7 requeue, asked ` + tm + `\); #2 ` + tm +
		` redelivered=true \(c1 session 1 via n1 tag 3 ack\); #3 ` + tm + ` redelivered=false \(drain via n3\)$`
	if !regexp.MustCompile(want).MatchString(rep.Violations[0]) {
		t.Fatalf("violation %q\ndoes not match %s", rep.Violations[0], want)
	}
}

// Receipt order is not the broker's: a delivery the broker sent before it
// lost the consumer's connection, recorded after its redelivery to
// another consumer, is no violation (the cluster fault schedules' cut
// partitions do that); a second delivery without redelivered, or one to a
// consumer that asked only after the message was received elsewhere, is.
func TestSilentDuplicateSendOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events func(r *Recorder)
		want   string // a substring of the one violation; "" for none
	}{
		{"overtaken by its redelivery", func(r *Recorder) {
			asked := time.Now() // A's basic.consume
			r.RecordDelivery("q", Delivery{ID: "a", Redelivered: true, NotBefore: time.Now(), Via: "B"})
			r.RecordDelivery("q", Delivery{ID: "a", NotBefore: asked, Via: "A, its connection lost"})
		}, ""},
		{"to a consumer that asked after", func(r *Recorder) {
			r.RecordDelivery("q", Delivery{ID: "a", Redelivered: true, NotBefore: time.Now(), Via: "B"})
			asked := time.Now().Add(time.Microsecond) // after B received it
			r.RecordDelivery("q", Delivery{ID: "a", NotBefore: asked, Via: "A"})
		}, `(to a consumer that asked after it was received)`},
		{"twice without redelivered", func(r *Recorder) {
			asked := time.Now()
			r.RecordDelivery("q", Delivery{ID: "a", NotBefore: asked, Via: "B"})
			r.RecordDelivery("q", Delivery{ID: "a", Redelivered: true, NotBefore: asked, Via: "C"})
			r.RecordDelivery("q", Delivery{ID: "a", NotBefore: asked, Via: "A"})
		}, `(a second time)`},
		{"no send time: receipt order", func(r *Recorder) {
			r.Delivered("q", "a", true)
			r.Delivered("q", "a", false)
		}, `(after it was received)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New()
			r.Published("a")
			tc.events(r)
			rep := r.Check(Checks{})
			switch {
			case tc.want == "" && (!rep.OK() || rep.Overtaken != 1 || !strings.Contains(rep.String(), "0 silent duplicates (1 overtaken)")):
				t.Fatalf("want a sound history with one delivery overtaken, got %v (%d overtaken)", rep, rep.Overtaken)
			case tc.want != "" && (len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], tc.want)):
				t.Fatalf("violations %q, want exactly one with %q", rep.Violations, tc.want)
			}
		})
	}
}
