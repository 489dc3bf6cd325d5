// Package version says which build of brokerd is running, for
// "brokerd -version", "brokerctl -version", the management API's
// /api/overview and the AMQP server properties.
//
// The version comes from the build information the Go toolchain embeds
// (runtime/debug.ReadBuildInfo), so nothing has to be stamped at link time:
//
//   - "go install github.com/brokerd/brokerd/cmd/brokerd@v1.2.0" records the
//     module version: "v1.2.0".
//   - "go build" in a git checkout (Go 1.24 and later) records a version
//     derived from the repository: the tag at HEAD ("v1.2.0"), or a
//     pseudo-version naming the commit ("v1.2.1-0.20261126093713-92817b3abcde"),
//     with "+dirty" when the work tree had uncommitted changes.
//   - Without a module version (-buildvcs=false, go run, test binaries) it is
//     "devel", followed by the commit when known ("devel-92817b3abcde", and
//     "+dirty" as above).
package version

import (
	"runtime/debug"
	"sync"
)

// String returns the version of the running binary. Safe for concurrent
// use; the build information is read once.
func String() string { return cached() }

var cached = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fromBuildInfo(nil)
	}
	return fromBuildInfo(bi)
})

// revLen is how many hex digits of the commit hash "devel-" versions show:
// as many as Go's pseudo-versions.
const revLen = 12

// fromBuildInfo derives the version from bi; nil means the binary carries
// no build information.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := "devel"
	if rev != "" {
		if len(rev) > revLen {
			rev = rev[:revLen]
		}
		v += "-" + rev
	}
	if dirty {
		v += "+dirty"
	}
	return v
}
