package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/brokerd/brokerd/internal/version"
)

// -version prints "brokerd <version>" on stdout and exits 0 before reading
// any configuration or touching a data directory: a package's install
// script may run it as any user, anywhere.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-version", "-config", filepath.Join(dir, "missing.toml"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("brokerd -version: %v\nstderr: %s", err, stderr.String())
	}
	// The child is this test binary, so its version is ours.
	if got, want := stdout.String(), "brokerd "+version.String()+"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("-version left %v in its working directory (err %v)", entries, err)
	}
}
