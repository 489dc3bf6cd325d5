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

func TestEvictions(t *testing.T) {
	sizes := []int{80, 80, 80}
	at := func(i int) int { return sizes[i] }
	cases := []struct {
		l     Limits
		ready int
		bytes int64
		want  int
	}{
		{Limits{MaxLen: 1, MaxBytes: -1}, 3, 240, 2},   // P1,P2 go; P3 stays (B45)
		{Limits{MaxLen: 0, MaxBytes: -1}, 1, 80, 1},    // max-length 0 drops the message itself
		{Limits{MaxLen: -1, MaxBytes: 100}, 2, 160, 1}, // 100-byte limit, 80-byte bodies: one stays
		{Limits{MaxLen: -1, MaxBytes: 50}, 1, 80, 1},   // a body larger than the limit goes too
		{Limits{MaxLen: 5, MaxBytes: -1}, 3, 240, 0},
		{Limits{MaxLen: 1, MaxBytes: -1, Mode: RejectPublish}, 3, 240, 0}, // requeue over the limit: kept (B48)
	}
	for i, c := range cases {
		if got := c.l.Evictions(c.ready, c.bytes, at); got != c.want {
			t.Errorf("case %d: Evictions = %d, want %d", i, got, c.want)
		}
	}
}

// After the evictions a drop-head queue is within both limits, and no
// fewer evictions would do.
func TestEvictionsMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		n := r.IntN(20)
		sizes := make([]int, n)
		var total int64
		for j := range sizes {
			sizes[j] = r.IntN(100)
			total += int64(sizes[j])
		}
		l := Limits{MaxLen: int64(r.IntN(25)) - 3, MaxBytes: int64(r.IntN(1500)) - 100}
		within := func(k int) bool {
			var b int64
			for _, s := range sizes[k:] {
				b += int64(s)
			}
			return (l.MaxLen < 0 || int64(n-k) <= l.MaxLen) && (l.MaxBytes < 0 || b <= l.MaxBytes)
		}
		k := l.Evictions(n, total, func(i int) int { return sizes[i] })
		if !within(k) || (k > 0 && within(k-1)) {
			t.Fatalf("limits %+v sizes %v: Evictions = %d is not the minimal count", l, sizes, k)
		}
	}
}
