package fdbudget

import (
	"os"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ limit, store, http, amqp int }{
		{256, 128, 16, 80},
		{1024, 256, 64, 672},
		{65536, 8192, 1024, 56288},
		{1 << 20, 8192, 1024, 1<<20 - 8192 - 1024 - 32},
		{64, 128, 8, 8}, // too low for the budget: the shares overrun it, AMQP keeps a few
	} {
		b := Split(tc.limit)
		if b.Store != tc.store || b.HTTP != tc.http || b.AMQP != tc.amqp {
			t.Errorf("Split(%d) = %+v, want store %d, HTTP %d, AMQP %d", tc.limit, b, tc.store, tc.http, tc.amqp)
		}
	}
}

// Free counts what is open: opening files lowers it by as many.
func TestFree(t *testing.T) {
	before, err := Free()
	if err != nil {
		t.Skipf("cannot count descriptors here: %v", err)
	}
	var files []*os.File
	for range 10 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	after, err := Free()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if before-after != 10 {
		t.Fatalf("Free went from %d to %d with 10 files opened", before, after)
	}
}
