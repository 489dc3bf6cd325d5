package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in the file as a Go duration string
// ("60s", "1m30s", "250ms"). Convert with time.Duration(d).
type Duration time.Duration

// String returns the Go duration string, e.g. "1m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts anything
// time.ParseDuration does.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a number with a unit, such as \"60s\" or \"1m30s\"", s)
	}
	*d = Duration(v)
	return nil
}

// ByteSize is a number of bytes. In the file it is either a bare integer
// (bytes) or a string with a unit: "50MB", "1GiB", "512 KiB". Decimal units
// are powers of 1000 (kB, MB, GB, TB), binary units powers of 1024 (KiB, MiB,
// GiB, TiB); units are matched without regard to case, so "mb" is "MB".
type ByteSize uint64

// Byte size units.
const (
	KB  ByteSize = 1000
	MB  ByteSize = 1000 * KB
	GB  ByteSize = 1000 * MB
	TB  ByteSize = 1000 * GB
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

// units in the order String tries them: largest first, binary before
// decimal at each magnitude.
var units = []struct {
	name string
	size ByteSize
}{
	{"TiB", TiB}, {"TB", TB}, {"GiB", GiB}, {"GB", GB},
	{"MiB", MiB}, {"MB", MB}, {"KiB", KiB}, {"kB", KB}, {"B", 1},
}

const unitList = "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB"

// String returns the size in the largest unit that divides it exactly
// ("128MiB", "50MB", "1000"), in a form ParseByteSize accepts.
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range units[:len(units)-1] {
		if b%u.size == 0 {
			return strconv.FormatUint(uint64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(b), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler using ParseByteSize.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseByteSize parses a whole number of bytes with an optional unit:
// "1024", "50MB", "1GiB", "512 KiB". Fractions ("1.5GB") are refused:
// write them in a smaller unit ("1536MiB").
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("invalid size %q: must not be negative", s)
	}
	n := 0
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("invalid size %q: want a whole number with an optional unit (%s), such as \"50MB\"", s, unitList)
	}
	digits, unit := t[:n], strings.TrimSpace(t[n:])
	if strings.HasPrefix(unit, ".") {
		return 0, fmt.Errorf("invalid size %q: fractions are not supported; use a smaller unit, such as \"1536MiB\" for 1.5GiB", s)
	}
	mult := ByteSize(0)
	if unit == "" {
		mult = 1
	}
	for _, u := range units {
		if strings.EqualFold(unit, u.name) {
			mult = u.size
			break
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (want one of %s)", s, unit, unitList)
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || v > math.MaxUint64/uint64(mult) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(v) * mult, nil
}

// StorageEngine selects the message store.
type StorageEngine string

const (
	// EngineDisk is the durable store (WAL, segments, index) under
	// storage.data_dir. The default.
	EngineDisk StorageEngine = "disk"
	// EngineMemory keeps everything in memory: nothing survives a restart.
	// For tests and throwaway brokers.
	EngineMemory StorageEngine = "memory"
)

// StorageEngines lists the valid values of StorageEngine.
var StorageEngines = []StorageEngine{EngineDisk, EngineMemory}

// SyncPolicy says when the WAL fsyncs, and therefore when a publisher
// confirm may be sent.
type SyncPolicy string

const (
	// SyncFsync is group commit: one fsync covers every record queued while
	// the previous fsync ran; a confirm goes out after the fsync that covers
	// its record. The default: a confirmed message survives power loss.
	SyncFsync SyncPolicy = "fsync"
	// SyncInterval confirms after the write(2) and fsyncs every
	// storage.sync_interval: a process crash loses nothing, a machine crash
	// may lose the last interval's confirmed messages.
	SyncInterval SyncPolicy = "interval"
	// SyncNone never fsyncs (except when a log file is full); confirms go
	// out after the write(2). A machine crash loses confirmed messages. For
	// benchmarks only.
	SyncNone SyncPolicy = "none"
)

// SyncPolicies lists the valid values of SyncPolicy.
var SyncPolicies = []SyncPolicy{SyncFsync, SyncInterval, SyncNone}

// LogLevel is the minimum level logged.
type LogLevel string

// Log levels.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// LogLevels lists the valid values of LogLevel.
var LogLevels = []LogLevel{LevelDebug, LevelInfo, LevelWarn, LevelError}

// errBadLevel is returned by LogLevel.Slog for a level Validate would refuse.
var errBadLevel = errors.New("config: invalid log level")

// Slog returns the slog level for l. It fails only for values Validate
// refuses.
func (l LogLevel) Slog() (slog.Level, error) {
	switch l {
	case LevelDebug:
		return slog.LevelDebug, nil
	case LevelInfo:
		return slog.LevelInfo, nil
	case LevelWarn:
		return slog.LevelWarn, nil
	case LevelError:
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("%w %q", errBadLevel, string(l))
}

// LogFormat selects the slog handler.
type LogFormat string

// Log formats.
const (
	FormatText LogFormat = "text" // slog.TextHandler
	FormatJSON LogFormat = "json" // slog.JSONHandler
)

// LogFormats lists the valid values of LogFormat.
var LogFormats = []LogFormat{FormatText, FormatJSON}

// UserTags lists the tags a bootstrap user may carry; they mean what they
// mean in RabbitMQ. (Users made at run time may carry any tag, as in
// RabbitMQ.)
var UserTags = []string{"administrator", "monitoring", "policymaker", "management", "impersonator"}
