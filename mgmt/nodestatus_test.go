package mgmt_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/brokerd/brokerd/mgmt"
)

// TestOverviewNodeStatus: with Options.Daemon the overview tells
// monitoring and administrator users the process's figures (node_status,
// RabbitMQ's /api/nodes names) and an administrator gets /api/environment;
// a management user gets neither, as RabbitMQ's /api/nodes is for
// monitoring users.
func TestOverviewNodeStatus(t *testing.T) {
	dir := t.TempDir()
	started := time.Now().Add(-90 * time.Second)
	a := startAPIWith(t, mgmt.Options{Daemon: func() mgmt.DaemonInfo {
		return mgmt.DaemonInfo{PID: os.Getpid(), Started: started, DataDir: dir, ConfigFile: "/etc/brokerd.toml",
			MemoryLimit: 1 << 40, DiskFreeLimit: 1 << 20, Environment: map[string]any{"amqp.listen": "x:1"}}
	}})
	ns, ok := a.must(200, "GET", "/overview", nil).object(t)["node_status"].(map[string]any)
	if !ok {
		t.Fatal("no node_status for the administrator")
	}
	up, _ := ns["uptime"].(float64)
	if ns["os_pid"] != strconv.Itoa(os.Getpid()) || up < 90_000 || ns["db_dir"] != dir ||
		len(ns["config_files"].([]any)) != 1 || ns["mem_limit"] != float64(1<<40) || ns["mem_alarm"] != false ||
		ns["disk_free_limit"] != float64(1<<20) || ns["disk_free_alarm"] != false {
		t.Errorf("node_status %v", ns)
	}
	if used, _ := ns["mem_used"].(float64); used <= 0 {
		t.Errorf("mem_used %v", ns["mem_used"])
	}
	if free, _ := ns["disk_free"].(float64); free <= 0 {
		t.Errorf("disk_free %v", ns["disk_free"])
	}
	if env := a.must(200, "GET", "/environment", nil).object(t); env["amqp.listen"] != "x:1" {
		t.Errorf("environment %v", env)
	}

	for _, tags := range []string{"monitoring", "management"} {
		a.must(201, "PUT", "/users/"+tags, map[string]any{"password": "pw", "tags": tags})
		a.must(201, "PUT", "/permissions/%2F/"+tags, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
		ov := a.as(tags, "pw", "GET", "/overview", nil)
		if _, shown := ov.object(t)["node_status"]; shown != (tags == "monitoring") {
			t.Errorf("%s user: node_status shown %v", tags, shown)
		}
		if st := a.as(tags, "pw", "GET", "/environment", nil).status; st != 403 && st != 401 {
			t.Errorf("%s user: /api/environment %d", tags, st)
		}
	}
}
