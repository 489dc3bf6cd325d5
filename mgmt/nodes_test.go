package mgmt_test

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// startNodeAPI starts a broker whose API reports the node with node's
// options, its AMQP server the broker's.
func startNodeAPI(t *testing.T, maxConns int, node mgmt.NodeOptions) *api {
	t.Helper()
	inst := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxConnections: maxConns}})
	node.AMQP = inst.Server()
	a := &api{t: t, Instance: inst, opts: mgmt.Options{Node: node}}
	a.serve()
	t.Cleanup(a.stopAPI)
	return a
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("%s is %T %v, want a number", key, m[key], m[key])
	}
	return v
}

// /api/nodes lists the one node with RabbitMQ's fields, each measured:
// descriptors, sockets, memory and disk against the limits in force.
func TestNodes(t *testing.T) {
	dir := t.TempDir()
	a := startNodeAPI(t, 100, mgmt.NodeOptions{DataDir: dir,
		MemoryLimit: func() uint64 { return 3 << 30 }, DiskFreeLimit: func() uint64 { return 50 << 20 }})
	list := a.must(200, "GET", "/nodes", nil).list(t)
	if len(list) != 1 {
		t.Fatalf("%d nodes, want 1", len(list))
	}
	n := list[0]
	name := a.must(200, "GET", "/overview", nil).object(t)["node"]
	if n["name"] != name || n["type"] != "disc" || n["running"] != true {
		t.Errorf("node name %v type %v running %v, want %v disc true", n["name"], n["type"], n["running"], name)
	}
	for _, k := range []string{"name", "type", "running", "uptime", "mem_used", "mem_limit", "mem_alarm", "disk_free",
		"disk_free_limit", "disk_free_alarm", "fd_used", "fd_total", "sockets_used", "sockets_total", "proc_used",
		"proc_total", "processors", "run_queue", "os_pid", "db_dir", "rates_mode", "exchange_types", "partitions",
		"gc_num", "gc_bytes_reclaimed", "context_switches", "mem_calculation_strategy", "auth_mechanisms"} {
		if _, ok := n[k]; !ok {
			t.Errorf("node has no %s", k)
		}
	}
	if n["os_pid"] != strconv.Itoa(os.Getpid()) {
		t.Errorf("os_pid %v, want %d", n["os_pid"], os.Getpid())
	}
	if num(t, n, "mem_limit") != 3<<30 || n["mem_alarm"] != false || num(t, n, "disk_free_limit") != 50<<20 || n["disk_free_alarm"] != false {
		t.Errorf("limits: mem_limit %v mem_alarm %v disk_free_limit %v disk_free_alarm %v", n["mem_limit"], n["mem_alarm"], n["disk_free_limit"], n["disk_free_alarm"])
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	// Free space moves with whatever else writes to the filesystem: within 1 GiB.
	if free := num(t, n, "disk_free"); free <= 0 || free > float64(fs.Bavail*uint64(fs.Bsize))+(1<<30) || free < float64(fs.Bavail*uint64(fs.Bsize))-(1<<30) {
		t.Errorf("disk_free %v, statfs says %d", free, fs.Bavail*uint64(fs.Bsize))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if num(t, n, "fd_total") != float64(min(lim.Cur, 1<<30)) {
		t.Errorf("fd_total %v, RLIMIT_NOFILE %d", n["fd_total"], lim.Cur)
	}
	if num(t, n, "processors") != float64(runtime.NumCPU()) || num(t, n, "proc_used") < 1 || num(t, n, "mem_used") <= 0 {
		t.Errorf("processors %v proc_used %v mem_used %v", n["processors"], n["proc_used"], n["mem_used"])
	}
	if num(t, n, "sockets_total") != 100 || num(t, n, "sockets_used") != 0 || n["db_dir"] != dir {
		t.Errorf("sockets_total %v sockets_used %v db_dir %v, want 100, 0, %s", n["sockets_total"], n["sockets_used"], n["db_dir"], dir)
	}

	// Two AMQP connections and 50 more descriptors show.
	a.Dial(t)
	a.Dial(t)
	var files []*os.File
	for range 50 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	m := a.must(200, "GET", "/nodes/"+pathEscape(name.(string)), nil).object(t)
	if num(t, m, "sockets_used") != 2 {
		t.Errorf("sockets_used %v with two connections, want 2", m["sockets_used"])
	}
	// Each connection is a descriptor too; HTTP connections may come and go.
	if got, before := num(t, m, "fd_used"), num(t, n, "fd_used"); got < before+50 {
		t.Errorf("fd_used %v after opening 50 files and 2 connections, was %v", got, before)
	}
	if num(t, m, "uptime") < num(t, n, "uptime") {
		t.Errorf("uptime went back: %v then %v", n["uptime"], m["uptime"])
	}

	wantError(t, a.do("GET", "/nodes/rabbit@nowhere", nil), 404, "Object Not Found", "")
	a.must(201, "PUT", "/users/mgr", map[string]any{"password": "pw", "tags": "management"})
	wantError(t, a.as("mgr", "pw", "GET", "/nodes", nil), 401, "not_authorised", "Not monitor")
}
