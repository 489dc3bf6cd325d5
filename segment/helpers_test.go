package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Payload generators, shared by tests and benchmarks. Both are
// deterministic for a seed.

var (
	words      = []string{"alpha", "bravo", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "juniper", "kestrel", "lumen", "meadow", "nimbus", "onyx", "pepper", "quartz", "raven", "saffron", "tundra", "umber", "violet", "willow", "xenon", "yarrow", "zephyr"}
	events     = []string{"order.created", "order.paid", "order.shipped", "order.cancelled", "cart.updated", "payment.refunded", "inventory.reserved"}
	countries  = []string{"DE", "FR", "NL", "US", "GB", "SE", "PL", "ES", "IT", "JP"}
	currencies = []string{"EUR", "USD", "GBP", "SEK", "JPY"}
	categories = []string{"books", "garden", "kitchen", "toys", "electronics", "apparel", "sports"}
	statuses   = []string{"pending", "authorized", "captured", "fulfilled", "failed"}
	tiers      = []string{"bronze", "silver", "gold", "platinum"}
)

func pick(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }

func hexID(r *rand.Rand, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[r.IntN(16)]
	}
	return string(b)
}

// jsonBody returns a JSON-like order event of exactly size bytes: the
// field names repeat from message to message, the values (ids, amounts,
// timestamps, line items) vary. Long bodies are orders with many items; the
// document is cut at size.
func jsonBody(r *rand.Rand, size int) []byte {
	b := make([]byte, 0, size+512)
	for len(b) < size {
		b = append(b, `{"type":"`...)
		b = append(b, pick(r, events)...)
		b = append(b, `","id":"`...)
		b = append(b, hexID(r, 8)+"-"+hexID(r, 4)+"-"+hexID(r, 4)+"-"+hexID(r, 12)...)
		b = fmt.Appendf(b, `","ts":"2025-%02d-%02dT%02d:%02d:%02d.%03dZ","source":"%s-svc","customer":{"id":"cus_%s","email":"%s.%s%d@example.com","country":"%s","tier":"%s"},"currency":"%s","items":[`,
			1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000), pick(r, words),
			hexID(r, 10), pick(r, words), pick(r, words), r.IntN(1000), pick(r, countries), pick(r, tiers), pick(r, currencies))
		total := 0
		for i := 0; len(b) < size-200 || i == 0; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			price := 99 + r.IntN(50000)
			qty := 1 + r.IntN(5)
			total += price * qty
			b = fmt.Appendf(b, `{"sku":"SKU-%05d","name":"%s %s","category":"%s","qty":%d,"price":%d.%02d}`,
				r.IntN(100000), pick(r, words), pick(r, words), pick(r, categories), qty, price/100, price%100)
			if i >= 200 {
				break
			}
		}
		b = fmt.Appendf(b, `],"total":%d.%02d,"status":"%s","meta":{"ip":"10.%d.%d.%d","attempt":%d,"trace":"%s"}}`,
			total/100, total%100, pick(r, statuses), r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(4), hexID(r, 16))
	}
	return b[:size]
}

// randomBody returns size random bytes.
func randomBody(r *rand.Rand, size int) []byte {
	b := make([]byte, size)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// testBlob returns blob i of a test set: a varied size (empty ones
// included), with contents that name i, so a blob read from the wrong
// place never passes for the right one.
func testBlob(i int, size int) []byte {
	b := make([]byte, size)
	tag := []byte("blob-" + strconv.Itoa(i) + ";")
	for j := 0; j < size; j += len(tag) {
		copy(b[j:], tag)
	}
	return b
}

// blobSizes is the size of each test blob: mostly small, some empty, some
// a few KiB, and one above the test block size.
func blobSizes(n int, seed uint64, big int) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	sizes := make([]int, n)
	for i := range sizes {
		switch k := r.IntN(20); {
		case k == 0:
			sizes[i] = 0
		case k < 3:
			sizes[i] = 1000 + r.IntN(5000)
		default:
			sizes[i] = 1 + r.IntN(600)
		}
	}
	if n > 3 {
		sizes[n/3] = big
	}
	return sizes
}

// openT opens a store in dir on fs for a test, closing it at cleanup.
func openT(t testing.TB, fs vfs.FS, dir string, opts Options) *Store {
	t.Helper()
	opts.FS = fs
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// smallOpts are options that cut blocks every few blobs and roll files
// every few blocks, so small tests exercise both.
func smallOpts() Options {
	return Options{BlockSize: 4 << 10, TargetSize: 16 << 10, CacheBytes: 64 << 10}
}

// writeBlobs writes blobs with one Writer and returns their Locs.
func writeBlobs(t testing.TB, s *Store, blobs [][]byte) []Loc {
	t.Helper()
	w, err := s.NewWriter()
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	locs := make([]Loc, len(blobs))
	for i, b := range blobs {
		if locs[i], err = w.Add(b); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return locs
}

// checkBlobs reads every loc and compares it with its blob.
func checkBlobs(t testing.TB, s *Store, locs []Loc, blobs [][]byte) {
	t.Helper()
	for i, loc := range locs {
		got, err := s.Read(loc, nil)
		if err != nil {
			t.Fatalf("Read blob %d at %+v: %v", i, loc, err)
		}
		if !bytes.Equal(got, blobs[i]) {
			t.Fatalf("Read blob %d at %+v: got %d bytes %.40q, want %d bytes %.40q", i, loc, len(got), got, len(blobs[i]), blobs[i])
		}
	}
}

// asCorrupt returns err as a *CorruptError or fails the test.
func asCorrupt(t testing.TB, err error) *CorruptError {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("got error %v (%T), want a *CorruptError", err, err)
	}
	return ce
}

// rawBlock builds a block's raw payload from blobs: the data, then the
// table of ends, as the Writer does.
func rawBlock(blobs [][]byte) []byte {
	var raw []byte
	for _, b := range blobs {
		raw = append(raw, b...)
	}
	end := 0
	for _, b := range blobs {
		end += len(b)
		raw = binary.LittleEndian.AppendUint32(raw, uint32(end))
	}
	return raw
}
