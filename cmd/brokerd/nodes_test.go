package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// /api/nodes reports the daemon's own process and the limits its
// configuration set: the memory watermark, the free-disk limit (the disk
// store's watch), the AMQP connection limit, the data directory, and
// mgmt.rates_mode.
func TestNodesReportTheDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgFile := filepath.Join(dir, "brokerd.toml")
	text := "[limits]\nmemory_high_watermark_bytes = \"3GiB\"\ndisk_free_limit = \"60MiB\"\nmax_connections = 77\n" +
		"[mgmt]\nrates_mode = \"none\"\nsample_interval = \"10s\"\n"
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", data)
	req, _ := http.NewRequest("GET", d.mgmtURL()+"/api/nodes", nil)
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var nodes []map[string]any
	if err := json.NewDecoder(res.Body).Decode(&nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("GET /api/nodes: %d %v %v", res.StatusCode, nodes, err)
	}
	n := nodes[0]
	abs, _ := filepath.Abs(data)
	for k, want := range map[string]any{
		"mem_limit": float64(3 << 30), "disk_free_limit": float64(60 << 20), "sockets_total": 77.0,
		"os_pid": strconv.Itoa(d.cmd.Process.Pid), "db_dir": abs, "mem_alarm": false, "disk_free_alarm": false,
		"rates_mode": "none",
	} {
		if n[k] != want {
			t.Errorf("%s = %v, want %v", k, n[k], want)
		}
	}
	if cf, _ := n["config_files"].([]any); len(cf) != 1 || cf[0] != cfgFile {
		t.Errorf("config_files %v, want [%s]", n["config_files"], cfgFile)
	}
	if free, _ := n["disk_free"].(float64); free <= 0 {
		t.Errorf("disk_free %v", n["disk_free"])
	}
}
