package wal

import (
	"bytes"
	"errors"
	"testing"
)

var decodeErrors = []error{errZeroHeader, errShort, errBadLength, errBadClass, errBadLSN, errBadCRC}

func isDecodeError(err error) bool {
	for _, e := range decodeErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func TestRecordEncoding(t *testing.T) {
	rec := appendRecord(nil, 0x0102030405060708, Volatile, []byte("hi"))
	want := []byte{
		0, 0, 0, 0, // CRC, checked below
		2, 0, 0, 0, // length
		2,                      // class
		8, 7, 6, 5, 4, 3, 2, 1, // LSN
		'h', 'i',
	}
	if !bytes.Equal(rec[4:], want[4:]) {
		t.Fatalf("encoding % x, want % x", rec, want)
	}
	h, p, n, err := decodeRecord(append(rec, 0xff))
	if err != nil || n != len(rec) || h.lsn != 0x0102030405060708 || h.class != Volatile || string(p) != "hi" {
		t.Fatalf("decode = %+v %q %d %v", h, p, n, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errZeroHeader},
		{"zero header", make([]byte, recordHeaderSize), errZeroHeader},
		{"short header", rec[:5], errShort},
		{"short payload", rec[:len(rec)-1], errShort},
		{"class 0", func() []byte { b := bytes.Clone(rec); b[8] = 0; return b }(), errBadClass},
		{"LSN 0", appendRecord(nil, 0, Durable, nil), errBadLSN},
		{"CRC", func() []byte { b := bytes.Clone(rec); b[len(b)-1]++; return b }(), errBadCRC},
	} {
		if _, _, _, err := decodeRecord(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestFileHeader(t *testing.T) {
	h := appendFileHeader(nil, 77)
	if first, reason := decodeFileHeader(h); first != 77 || reason != "" {
		t.Fatalf("decode = %d %q", first, reason)
	}
	for i := range h {
		b := bytes.Clone(h)
		b[i] ^= 1
		if _, reason := decodeFileHeader(b); reason == "" {
			t.Fatalf("header with byte %d flipped accepted", i)
		}
	}
}

// FuzzRecordDecode: the decoder never panics, fails only with its own
// errors, and whatever it accepts re-encodes to the same bytes.
func FuzzRecordDecode(f *testing.F) {
	one := appendRecord(nil, 1, Durable, nil)
	two := appendRecord(bytes.Clone(one), 2, Volatile, []byte("hello"))
	big := appendRecord(nil, 1<<40, Durable, bytes.Repeat([]byte{0xab}, 300))
	for _, seed := range [][]byte{
		one, two, big, two[len(one):], big[:len(big)-1], big[:10],
		make([]byte, recordHeaderSize), payload(9),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, n, err := decodeRecord(b)
		if err != nil {
			if !isDecodeError(err) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if n > len(b) || n != encodedSize(len(p)) || int(h.length) != len(p) {
			t.Fatalf("n %d, payload %d, length %d, input %d", n, len(p), h.length, len(b))
		}
		if again := appendRecord(nil, h.lsn, h.class, p); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding % x, decoded from % x", again, b[:n])
		}
	})
}

// FuzzFileHeaderDecode: the header decoder never panics and what it
// accepts re-encodes to the same bytes.
func FuzzFileHeaderDecode(f *testing.F) {
	f.Add(appendFileHeader(nil, 1))
	f.Add(appendFileHeader(nil, 1<<50))
	f.Add(make([]byte, fileHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		first, reason := decodeFileHeader(b)
		if reason != "" {
			return
		}
		if again := appendFileHeader(nil, first); !bytes.Equal(again, b[:fileHeaderSize]) {
			t.Fatalf("re-encoding % x, decoded from % x", again, b[:fileHeaderSize])
		}
	})
}

// FuzzFileName: parseFileName accepts exactly fileName's outputs.
func FuzzFileName(f *testing.F) {
	f.Add(fileName(1))
	f.Add(fileName(1 << 60))
	f.Add("000000000000000A.wal")
	f.Add(lockName)
	f.Fuzz(func(t *testing.T, name string) {
		if lsn, ok := parseFileName(name); ok && fileName(lsn) != name {
			t.Fatalf("parseFileName(%q) = %d, which is named %q", name, lsn, fileName(lsn))
		}
	})
}
