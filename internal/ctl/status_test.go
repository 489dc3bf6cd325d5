package ctl

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"

	resalarm "github.com/brokerd/brokerd/internal/alarm"
)

func TestStatus(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		_, amqpPort, err := net.SplitHostPort(strings.TrimSuffix(strings.SplitN(e.srv.amqp, "@", 2)[1], "/"))
		if err != nil {
			t.Fatal(err)
		}
		out := e.ok("status")
		for _, want := range []string{
			"Status of node ", "\nRuntime\n", "RabbitMQ version: ", "\nAlarms\n\n(none)\n",
			"\nTotals\n", "Queue count: ", "Virtual host count: ", "\nMessages\n", "Ready: ",
			"\nListeners\n", ", port: " + amqpPort + ", protocol: amqp, purpose: AMQP 0-9-1",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(e.ok("-q", "status"), "Status of node") {
			t.Error("-q status printed the informational line")
		}

		var rep statusReport
		if err := json.Unmarshal([]byte(e.ok("status", "--formatter", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.NodeName == "" || rep.RabbitVersion == "" || rep.Alarms == nil || len(rep.Alarms) != 0 {
			t.Errorf("status json: %+v", rep)
		}
		// At least guest's vhost and the test's.
		if rep.Totals.VirtualHosts < 2 {
			t.Errorf("virtual_host_count %d", rep.Totals.VirtualHosts)
		}
		amqp := false
		for _, l := range rep.Listeners {
			amqp = amqp || (l.Protocol == "amqp" && l.Port.String() == amqpPort)
		}
		if !amqp {
			t.Errorf("status json lists no AMQP listener on port %s: %+v", amqpPort, rep.Listeners)
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "status", "x")
		e.fails(ExitUsage, []string{"unit 'parsecs' is not supported"}, "status", "--unit", "parsecs")
	})
}

// TestStatusNode checks what status tells of brokerd's process against
// what this test knows of the brokerd it started: its PID, data
// directory and configuration file, the default limits (a memory
// watermark of 0.4 of physical memory, 50 MB of free disk), and that its
// listener is not said to speak AMQP 1.0.
func TestStatusNode(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		d := daemonOf(e.srv)
		if d == nil {
			t.Skip("the node's process is known only for a brokerd this test started")
		}
		dataDir, configFile := daemonPaths(e.srv.name)
		total, err := resalarm.TotalMemory()
		if err != nil {
			t.Fatal(err)
		}
		watermark := uint64(float64(total) * 0.4)
		gb := func(n uint64) string {
			s := strconv.FormatFloat(math.Round(float64(n)/1e9*1e4)/1e4, 'f', -1, 64)
			if !strings.Contains(s, ".") {
				s += ".0"
			}
			return s + " gb"
		}

		out := e.ok("status")
		for _, want := range []string{
			fmt.Sprintf("\nRuntime\n\nOS PID: %d\nUptime (seconds): ", d.cmd.Process.Pid),
			"\nData directory\n\nNode data directory: " + dataDir + "\n",
			"\nConfig files\n\n * " + configFile + "\n",
			"\nMemory\n\nTotal memory used: ",
			"\nMemory high watermark: " + gb(watermark) + "\n",
			"\nFree Disk Space\n\nLow free disk space watermark: 0.05 gb\nFree disk space: ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "AMQP 1.0") || strings.Contains(out, "unknown") {
			t.Errorf("status claims AMQP 1.0 or lacks a measurement:\n%s", out)
		}
		if !strings.Contains(e.ok("status", "--unit", "bytes"), "\nLow free disk space watermark: 50000000 bytes\n") {
			t.Error("status --unit bytes does not show the disk limit in bytes")
		}
		if !strings.Contains(e.ok("status", "--unit", "mb"), "\nLow free disk space watermark: 50.0 mb\n") {
			t.Error("status --unit mb does not show the disk limit in mb")
		}

		var rep struct {
			PID           int64                       `json:"pid"`
			Uptime        *int64                      `json:"uptime"`
			DataDirectory string                      `json:"data_directory"`
			ConfigFiles   []string                    `json:"config_files"`
			Memory        map[string]map[string]int64 `json:"memory"`
			Strategy      string                      `json:"vm_memory_calculation_strategy"`
			MemLimit      uint64                      `json:"vm_memory_high_watermark_limit"`
			DiskFreeLimit uint64                      `json:"disk_free_limit"`
			DiskFree      uint64                      `json:"disk_free"`
			Listeners     []statusListener            `json:"listeners"`
		}
		if err := json.Unmarshal([]byte(e.ok("status", "--formatter", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.PID != int64(d.cmd.Process.Pid) || rep.Uptime == nil || *rep.Uptime < 0 ||
			rep.DataDirectory != dataDir || len(rep.ConfigFiles) != 1 || rep.ConfigFiles[0] != configFile ||
			rep.Memory["total"][rep.Strategy] <= 0 || rep.MemLimit != watermark ||
			rep.DiskFreeLimit != 50_000_000 || rep.DiskFree == 0 {
			t.Errorf("status json: %+v", rep)
		}
		for _, l := range rep.Listeners {
			if l.Protocol == "amqp" && l.Purpose != "AMQP 0-9-1" {
				t.Errorf("amqp listener's purpose %q", l.Purpose)
			}
		}
	})
}
