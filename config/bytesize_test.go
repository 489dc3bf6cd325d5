package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		wantErr string // substring; "" means success
	}{
		{"1024", 1024, ""},
		{"0", 0, ""},
		{"50MB", 50_000_000, ""},
		{"50mb", 50_000_000, ""},
		{"1GiB", 1 << 30, ""},
		{"1gib", 1 << 30, ""},
		{"512 KiB", 512 << 10, ""},
		{"2kB", 2000, ""},
		{"2KB", 2000, ""},
		{"3TB", 3_000_000_000_000, ""},
		{"1TiB", 1 << 40, ""},
		{"7B", 7, ""},
		{" 10MiB ", 10 << 20, ""},
		{"50XB", 0, `unknown unit "XB"`},
		{"50 M", 0, `unknown unit "M"`},
		{"MB", 0, "want a whole number"},
		{"", 0, "want a whole number"},
		{"-1", 0, "must not be negative"},
		{"1.5GB", 0, "fractions are not supported"},
		{"20000000TiB", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseByteSize(%q) error = %v; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   ByteSize
		want string
	}{
		{0, "0"},
		{1000, "1kB"},
		{1023, "1023"},
		{1024, "1KiB"},
		{50 * MB, "50MB"},
		{128 * MiB, "128MiB"},
		{1536 * MiB, "1536MiB"},
		{2 * TiB, "2TiB"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q; want %q", uint64(tt.in), got, tt.want)
		}
		back, err := ParseByteSize(tt.in.String())
		if err != nil || back != tt.in {
			t.Errorf("ParseByteSize(%q) = %d, %v; want round trip to %d", tt.in.String(), back, err, uint64(tt.in))
		}
	}
}

func TestDurationUnmarshalText(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"60s", 60 * time.Second, false},
		{"1m30s", 90 * time.Second, false},
		{"250ms", 250 * time.Millisecond, false},
		{"0", 0, false},
		{"0s", 0, false},
		{"60", 0, true},
		{"ten seconds", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		var d Duration
		err := d.UnmarshalText([]byte(tt.in))
		if (err != nil) != tt.wantErr || (err == nil && time.Duration(d) != tt.want) {
			t.Errorf("UnmarshalText(%q) = %s, %v; want %s, error %t", tt.in, d, err, tt.want, tt.wantErr)
		}
	}
}

func TestLogLevelSlog(t *testing.T) {
	for _, l := range LogLevels {
		if _, err := l.Slog(); err != nil {
			t.Errorf("%q.Slog(): %v", l, err)
		}
	}
	if _, err := LogLevel("loud").Slog(); err == nil {
		t.Error(`"loud".Slog() succeeded; want an error`)
	}
}
