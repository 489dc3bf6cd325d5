package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := "92817b3abcdef0123456789abcdef0123456789a"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "devel"},
		{"release", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "v1.2.0"},
		{"pseudo-version wins over settings", &debug.BuildInfo{
			Main:     debug.Module{Version: "v1.2.1-0.20261126093713-92817b3abcde+dirty"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "true"),
		}, "v1.2.1-0.20261126093713-92817b3abcde+dirty"},
		{"devel, no vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"devel, clean", &debug.BuildInfo{
			Main:     debug.Module{Version: "(devel)"},
			Settings: settings("vcs", "git", "vcs.revision", rev, "vcs.modified", "false"),
		}, "devel-92817b3abcde"},
		{"devel, dirty", &debug.BuildInfo{
			Settings: settings("vcs.revision", rev, "vcs.modified", "true"),
		}, "devel-92817b3abcde+dirty"},
		{"short revision", &debug.BuildInfo{Settings: settings("vcs.revision", "abc")}, "devel-abc"},
	} {
		if got := fromBuildInfo(tc.bi); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// String reads the build information of the running binary: a test binary
// carries some (module version "(devel)") but no VCS stamp.
func TestStringIsTheRunningBinarys(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	if got, want := String(), fromBuildInfo(bi); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
