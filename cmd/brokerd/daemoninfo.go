package main

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/mgmt"
)

// daemonInfo answers the management API's questions about the process
// (mgmt.Options.Daemon): what it was started with, and the configuration
// and limits in force, which a reload replaces (set). Safe for concurrent
// use.
type daemonInfo struct {
	started             time.Time
	dataDir, configFile string
	cur                 atomic.Pointer[daemonState]
}

// daemonState is what a reload changes.
type daemonState struct {
	env                     map[string]any
	memLimit, diskFreeLimit uint64
}

func newDaemonInfo(started time.Time, dataDir, configFile string) *daemonInfo {
	return &daemonInfo{started: started, dataDir: absPath(dataDir), configFile: absPath(configFile)}
}

// absPath is p made absolute, for an operator reading it from elsewhere;
// p itself if that fails, "" for "".
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// set records the configuration in force and the memory watermark it
// computes to.
func (d *daemonInfo) set(cfg config.Config, memLimit uint64) {
	d.cur.Store(&daemonState{env: environment(cfg), memLimit: memLimit, diskFreeLimit: uint64(cfg.Limits.DiskFreeLimit)})
}

// info is mgmt.Options.Daemon.
func (d *daemonInfo) info() mgmt.DaemonInfo {
	st := d.cur.Load()
	if st == nil {
		st = &daemonState{} // before the limits are known
	}
	return mgmt.DaemonInfo{
		PID: os.Getpid(), Started: d.started, DataDir: d.dataDir, ConfigFile: d.configFile,
		MemoryLimit: st.memLimit, DiskFreeLimit: st.diskFreeLimit, Environment: st.env,
	}
}

// environment is cfg as /api/environment shows it: one key per setting,
// as flatten names them, with no secret: the bootstrap users show their
// names and tags (not their passwords or hashes), the bootstrap vhosts
// their names.
func environment(cfg config.Config) map[string]any {
	env := flatten(cfg)
	users := []map[string]any{}
	for _, u := range cfg.Users {
		tags := u.Tags
		if tags == nil {
			tags = []string{}
		}
		users = append(users, map[string]any{"name": u.Name, "tags": tags})
	}
	env["users"] = users
	vhosts := []string{}
	for _, v := range cfg.Vhosts {
		vhosts = append(vhosts, v.Name)
	}
	env["vhosts"] = vhosts
	return env
}
