package overflow

import (
	"math/rand/v2"
	"testing"
)

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"drop-head": DropHead, "reject-publish": RejectPublish, "reject-publish-dlx": RejectPublishDLX} {
		m, err := ParseMode(s)
		if err != nil || m != want || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("drop-tail"); err == nil {
		t.Error("ParseMode accepted drop-tail")
	}
}

func TestRefuses(t *testing.T) {
	cases := []struct {
		l           Limits
		ready       int
		bytes       int64
		size        int
		want        bool
		description string
	}{
		{Limits{MaxLen: 1, MaxBytes: -1, Mode: RejectPublish}, 0, 0, 10, false, "room for one"},
		{Limits{MaxLen: 1, MaxBytes: -1, Mode: RejectPublish}, 1, 10, 10, true, "full by count"},
		{Limits{MaxLen: 0, MaxBytes: -1, Mode: RejectPublish}, 0, 0, 1, true, "max-length 0 refuses everything"},
		{Limits{MaxLen: -1, MaxBytes: 100, Mode: RejectPublishDLX}, 1, 80, 20, false, "exactly at the byte limit"},
		{Limits{MaxLen: -1, MaxBytes: 100, Mode: RejectPublishDLX}, 1, 80, 21, true, "over the byte limit"},
		{Limits{MaxLen: 1, MaxBytes: 1, Mode: DropHead}, 5, 500, 10, false, "drop-head never refuses"},
		{None, 1 << 30, 1 << 40, 1 << 20, false, "no limits"},
	}
	for _, c := range cases {
		if got := c.l.Refuses(c.ready, c.bytes, c.size); got != c.want {
			t.Errorf("%s: Refuses = %t, want %t", c.description, got, c.want)
		}
	}
}

// evictions counts how many head messages drop-head removes, using Over
// as the broker does: one at a time while over.
func evictions(l Limits, sizes []int) int {
	var bytes int64
	for _, s := range sizes {
		bytes += int64(s)
	}
	n := 0
	for l.Over(len(sizes)-n, bytes) {
		bytes -= int64(sizes[n])
		n++
	}
	return n
}

func TestOver(t *testing.T) {
	cases := []struct {
		l     Limits
		sizes []int
		want  int
	}{
		{Limits{MaxLen: 1, MaxBytes: -1}, []int{80, 80, 80}, 2}, // P1,P2 go; P3 stays (B45)
		{Limits{MaxLen: 0, MaxBytes: -1}, []int{80}, 1},         // max-length 0 drops the message itself
		{Limits{MaxLen: -1, MaxBytes: 100}, []int{80, 80}, 1},   // 100-byte limit, 80-byte bodies: one stays
		{Limits{MaxLen: -1, MaxBytes: 50}, []int{80}, 1},        // a body larger than the limit goes too
		{Limits{MaxLen: 5, MaxBytes: -1}, []int{80, 80, 80}, 0},
		{Limits{MaxLen: 1, MaxBytes: -1, Mode: RejectPublish}, []int{80, 80, 80}, 0}, // requeue over the limit: kept (B48)
		{None, []int{1, 2, 3}, 0},
	}
	for i, c := range cases {
		if got := evictions(c.l, c.sizes); got != c.want {
			t.Errorf("case %d: evictions = %d, want %d", i, got, c.want)
		}
	}
}

// After the evictions a drop-head queue is within both limits, and no
// fewer evictions would do.
func TestOverMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		sizes := make([]int, r.IntN(20))
		for j := range sizes {
			sizes[j] = r.IntN(100)
		}
		l := Limits{MaxLen: int64(r.IntN(25)) - 3, MaxBytes: int64(r.IntN(1500)) - 100}
		within := func(k int) bool {
			var b int64
			for _, s := range sizes[k:] {
				b += int64(s)
			}
			return (l.MaxLen < 0 || int64(len(sizes)-k) <= l.MaxLen) && (l.MaxBytes < 0 || b <= l.MaxBytes)
		}
		k := evictions(l, sizes)
		if !within(k) || (k > 0 && within(k-1)) {
			t.Fatalf("limits %+v sizes %v: %d evictions is not the minimal count", l, sizes, k)
		}
	}
}
