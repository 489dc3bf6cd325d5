package history

import (
	"strings"
	"testing"
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
