package diskstore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// pointReader.get finds exactly the keys the index has, whatever the order
// and spacing of the lookups: steps forward by Next over dense runs, seeks
// over gaps and backwards, repeats, and runs off the end and back.
func TestPointReaderLookups(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet())
	defer s.Close()
	key := func(i int) []byte { return []byte(fmt.Sprintf("zz-test-%04d", i)) } // after every index key
	has := func(i int) bool { return i%3 != 0 && i < 200 }                      // gaps of one, then none past 199
	b := s.db.NewBatch()
	for i := range 300 {
		if has(i) {
			if err := b.Set(key(i), []byte(fmt.Sprint(i)), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	pr, err := s.newPointReader()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.close()
	var lookups []int
	for i := 0; i < 60; i++ { // dense, ascending
		lookups = append(lookups, i)
	}
	lookups = append(lookups, 60, 60, 100, 101, 150, 40, 41, 42, 199, 200, 250, 5, 299, 300, 1, 2, 120)
	for _, i := range lookups {
		v, ok, err := pr.get(key(i))
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if ok != has(i) {
			t.Fatalf("get %d: found %t, want %t", i, ok, has(i))
		}
		if ok && string(v) != fmt.Sprint(i) {
			t.Fatalf("get %d: value %q", i, v)
		}
	}
}
