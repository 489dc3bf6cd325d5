package index

import "testing"

func BenchmarkEntryKey(b *testing.B) {
	buf := make([]byte, 0, EntryKeyLen)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(EntryKeyLen)
		for i := range b.N {
			buf = EntryKey(buf[:0], 42, 5, uint64(i))
		}
	})
	b.Run("decode", func(b *testing.B) {
		k := EntryKey(nil, 42, 5, 1<<40)
		b.ReportAllocs()
		b.SetBytes(EntryKeyLen)
		for range b.N {
			if _, _, _, err := DecodeEntryKey(k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkExpiryKey(b *testing.B) {
	buf := make([]byte, 0, ExpiryKeyLen)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(ExpiryKeyLen)
		for i := range b.N {
			buf = ExpiryKey(buf[:0], 1767225600000+int64(i), 42, 5, uint64(i))
		}
	})
	b.Run("decode", func(b *testing.B) {
		k := ExpiryKey(nil, 1767225600000, 42, 5, 1<<40)
		b.ReportAllocs()
		b.SetBytes(ExpiryKeyLen)
		for range b.N {
			if _, _, _, _, err := DecodeExpiryKey(k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEntryValue(b *testing.B) {
	samples := sampleEntryValues()
	for _, c := range []struct {
		name string
		v    EntryValue
	}{
		{"plain", EntryValue{Msg: 1 << 30, Size: 1500}},
		{"ttl", EntryValue{Msg: 1 << 30, Size: 1500, Deadline: 1767225600000, DeliveryCount: 1}},
		{"deadlettered", samples[5]},
		{"retry", EntryValue{Msg: 1 << 30, Size: 1500, DeliveryCount: 2, AcquiredCount: 3, ReadyAt: 1767225600000}},
	} {
		enc := AppendEntryValue(nil, &c.v)
		buf := make([]byte, 0, 256)
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for range b.N {
				buf = AppendEntryValue(buf[:0], &c.v)
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			var v EntryValue
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for range b.N {
				if err := DecodeEntryValue(enc, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMsgValue(b *testing.B) {
	v := MsgValue{Refs: 2, Size: 1500, Loc: []byte{0, 0, 0, 7, 0, 1, 0x20, 0, 0, 0, 0x40}}
	enc := AppendMsgValue(nil, &v)
	buf := make([]byte, 0, 64)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for range b.N {
			buf = AppendMsgValue(buf[:0], &v)
		}
	})
	b.Run("decode", func(b *testing.B) {
		var got MsgValue
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for range b.N {
			if err := DecodeMsgValue(enc, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
