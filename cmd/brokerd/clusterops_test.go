package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brokerd/brokerd/internal/ctl"
	"github.com/brokerd/brokerd/internal/history"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// opsNodes is a 3-node cluster (testNodes) whose nodes serve the
// management API too, on http[i].
type opsNodes struct {
	*testNodes
	http []string
}

// startOpsNodes is startTestNodes with a management listener on each node.
func startOpsNodes(t *testing.T) *opsNodes {
	tn := newOpsNodes(t)
	for i := range tn.names {
		tn.start(i)
	}
	return tn
}

// newOpsNodes writes the three nodes' configurations and starts none.
func newOpsNodes(t *testing.T) *opsNodes {
	tn := &opsNodes{testNodes: &testNodes{t: t, names: []string{"n1", "n2", "n3"}}}
	var raft []string
	for range tn.names {
		tn.amqp = append(tn.amqp, rebindableAddr(t))
		tn.http = append(tn.http, rebindableAddr(t))
		raft = append(raft, rebindableAddr(t))
	}
	var peers []string
	for i, n := range tn.names {
		peers = append(peers, fmt.Sprintf("%q", n+"="+raft[i]))
	}
	base := t.TempDir()
	for i, n := range tn.names {
		cfg := fmt.Sprintf(`[storage]
data_dir = %q
[amqp]
listen = %q
[mgmt]
listen = %q
[cluster]
node_name = %q
listen = %q
peers = [%s]
`, filepath.Join(base, n), tn.amqp[i], tn.http[i], n, raft[i], strings.Join(peers, ", "))
		path := filepath.Join(base, n+".toml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tn.configs = append(tn.configs, path)
	}
	tn.procs = make([]*daemon, len(tn.names))
	tn.paused = make([]bool, len(tn.names))
	return tn
}

// get reads path of node i's management API (forwarded to the leader by
// a follower) as guest into out.
func (tn *opsNodes) get(i int, path string, out any) error {
	req, err := http.NewRequestWithContext(tn.t.Context(), "GET", "http://"+tn.http[i]+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s %s", path, res.Status, body)
	}
	if s, ok := out.(*string); ok {
		*s = string(body)
		return nil
	}
	return json.Unmarshal(body, out)
}

// await polls node i's path until ok holds for its answer: the leader's
// view changes with its loop's refreshes and the nodes' connections,
// which the test cannot wait on.
func (tn *opsNodes) await(i int, path, what string, ok func(body []byte) bool) []byte {
	tn.t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	var last string
	for time.Now().Before(deadline) {
		var s string
		if err := tn.get(i, path, &s); err != nil {
			last = err.Error()
		} else if last = s; ok([]byte(s)) {
			return []byte(s)
		}
		time.Sleep(50 * time.Millisecond) // polls the leader's view
	}
	tn.t.Fatalf("through %s, %s never held; last answer of %s: %s", tn.names[i], what, path, last)
	return nil
}

// brokerctl runs brokerctl against node i's management API and returns
// its standard output, failing the test unless it exits 0.
func (tn *opsNodes) brokerctl(i int, args ...string) string {
	tn.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(tn.t.Context(), 30*time.Second)
	defer cancel()
	args = append([]string{"--url", "http://guest:guest@" + tn.http[i]}, args...)
	if code := ctl.Main(ctx, args, ctl.Env{Stdout: &out, Stderr: &errb}); code != 0 {
		tn.t.Fatalf("brokerctl %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

type clusterView struct {
	ClusterName string `json:"cluster_name"`
	Node        string `json:"node"`
	Leader      string `json:"leader"`
	Term        uint64 `json:"term"`
	LastIndex   uint64 `json:"last_index"`
	Nodes       []struct {
		Name    string  `json:"name"`
		Leader  bool    `json:"leader"`
		Running bool    `json:"running"`
		Lag     *uint64 `json:"lag"`
		Match   *uint64 `json:"match_index"`
	} `json:"nodes"`
}

func parseView(t *testing.T, body []byte) clusterView {
	var v clusterView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("/api/cluster: %v: %s", err, body)
	}
	return v
}

// A 3-node cluster's management API, reached through a follower (which
// forwards it to the leader), lists every node with RabbitMQ's fields in
// /api/nodes, names the leader in /api/overview, and /api/cluster gives
// each follower's lag; brokerctl cluster_status prints them; /metrics has
// the Raft metrics. A follower killed with SIGKILL shows as not running
// and falls behind by what the leader commits without it.
func TestClusterOperations(t *testing.T) {
	tn := startOpsNodes(t)
	l := tn.leader()
	f := (l + 1) % 3
	leader := tn.names[l]
	allUp := func(body []byte) bool {
		v := parseView(t, body)
		if v.Leader != leader || len(v.Nodes) != 3 {
			return false
		}
		for _, n := range v.Nodes {
			if !n.Running || n.Lag == nil || *n.Lag != 0 {
				return false
			}
		}
		return true
	}
	v := parseView(t, tn.await(f, "/api/cluster", "every node running and caught up", allUp))
	if v.ClusterName != "brokerd" || v.Node != leader || v.Term == 0 {
		t.Errorf("/api/cluster: %+v", v)
	}
	for i, n := range v.Nodes {
		if n.Name != tn.names[i] || n.Leader != (i == l) || n.Match == nil || *n.Match == 0 {
			t.Errorf("/api/cluster node %d: %+v", i, n)
		}
	}

	var nodes []map[string]any
	if err := tn.get(f, "/api/nodes", &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("/api/nodes lists %d nodes: %v", len(nodes), nodes)
	}
	for i, n := range nodes {
		if n["name"] != tn.names[i] || n["type"] != "disc" || n["running"] != true {
			t.Errorf("/api/nodes %d: name %v type %v running %v", i, n["name"], n["type"], n["running"])
		}
		raft, _ := n["raft"].(map[string]any)
		if raft == nil || raft["leader"] != (i == l) {
			t.Errorf("/api/nodes %s: raft %v", tn.names[i], n["raft"])
		}
		_, hasUptime := n["uptime"]
		if hasUptime != (i == l) {
			t.Errorf("/api/nodes %s: uptime present %v (only the leader's is known)", tn.names[i], hasUptime)
		}
	}
	if links, _ := nodes[l]["cluster_links"].([]any); len(links) != 2 {
		t.Errorf("the leader's cluster_links: %v", nodes[l]["cluster_links"])
	}
	var ov map[string]any
	if err := tn.get(f, "/api/overview", &ov); err != nil {
		t.Fatal(err)
	}
	if ov["node"] != leader || ov["cluster_name"] != "brokerd" {
		t.Errorf("overview node %v cluster_name %v, want %s brokerd", ov["node"], ov["cluster_name"], leader)
	}

	out := tn.brokerctl(f, "cluster_status")
	for _, want := range []string{
		"Cluster status of node " + leader + " ...", "Cluster name: brokerd\n", "\nDisk Nodes\n\nn1\nn2\nn3\n",
		"\nRunning Nodes\n\nn1\nn2\nn3\n", "\nRaft\n\nLeader: " + leader + ", term: ",
		"Node: " + leader + ", role: leader, running: true, match index: ",
		"Node: " + tn.names[f] + ", role: follower, running: true, match index: ",
		"lag: 0 entries, last contact: ", "Not known for ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster_status lacks %q:\n%s", want, out)
		}
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(tn.brokerctl(f, "cluster_status", "--formatter", "json")), &js); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(js["running_nodes"]) != "[n1 n2 n3]" || fmt.Sprint(js["disk_nodes"]) != "[n1 n2 n3]" || js["raft"] == nil {
		t.Errorf("cluster_status json: %v", js)
	}

	var metrics string
	if err := tn.get(f, "/metrics", &metrics); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nbrokerd_raft_is_leader 1\n", "\nbrokerd_raft_serving 1\n",
		"brokerd_raft_follower_lag_entries{node=\"" + tn.names[f] + "\"} 0\n",
		"brokerd_raft_member_reachable{node=\"" + tn.names[f] + "\"} 1\n", "\nbrokerd_raft_entry_commit_latency_seconds_count "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Kill the other follower; publish through the first: the leader
	// sees the dead one not running and lagging.
	dead := (l + 2) % 3
	if err := tn.procs[dead].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tn.procs[dead].done
	tn.await(f, "/api/cluster", tn.names[dead]+" not running", func(body []byte) bool {
		return !parseView(t, body).Nodes[dead].Running
	})
	p := &clusterPublisher{tn: tn.testNodes, rec: history.New(), q: "ops"}
	if err := p.run(t.Context(), f, 200); err != nil {
		t.Fatal(err)
	}
	v = parseView(t, tn.await(f, "/api/cluster", tn.names[dead]+" lagging", func(body []byte) bool {
		n := parseView(t, body).Nodes[dead]
		return n.Lag != nil && *n.Lag > 0
	}))
	if n := v.Nodes[dead]; *n.Match+*n.Lag != v.LastIndex {
		t.Errorf("%s: match %d + lag %d != last index %d", tn.names[dead], *n.Match, *n.Lag, v.LastIndex)
	}
	out = tn.brokerctl(f, "cluster_status")
	running := strings.Join(deleteAt(tn.names, dead), "\n")
	if !strings.Contains(out, "\nRunning Nodes\n\n"+running+"\n\n") || !strings.Contains(out, "Node: "+tn.names[dead]+", role: follower, running: false") {
		t.Errorf("cluster_status with %s killed:\n%s", tn.names[dead], out)
	}
	var n map[string]any
	if err := tn.get(f, "/api/nodes/"+tn.names[dead], &n); err != nil {
		t.Fatal(err)
	}
	if n["running"] != false {
		t.Errorf("/api/nodes/%s: running %v", tn.names[dead], n["running"])
	}
	for i, d := range tn.procs {
		if strings.Contains(d.log(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race", tn.names[i])
		}
	}
}

func deleteAt(s []string, i int) []string {
	out := append([]string(nil), s[:i]...)
	return append(out, s[i+1:]...)
}

// A cluster node tells systemd READY=1 only once it has joined the
// cluster (it knows a leader): a node started alone campaigns without
// one and stays unready; once a second node makes a majority, it joins
// and READY=1 follows its "cluster: joined".
func TestClusterReadyOnceJoined(t *testing.T) {
	tn := newOpsNodes(t)
	sock := newNotifySocket(t)
	tn.procs[0] = startDaemonEnv(t, "", []string{"NOTIFY_SOCKET=" + sock.path}, "-config", tn.configs[0])
	// A campaign comes after an election timeout without a leader: the
	// node is up, has found none, and would have sent READY=1 by then if
	// it sent it at start.
	tn.procs[0].awaitLine("is starting a new election")
	select {
	case m := <-sock.msgs:
		t.Fatalf("a node without a leader sent %q", m)
	default:
	}
	tn.start(1)
	if m := sock.next(); !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("first sd_notify message %q, want READY=1", m)
	}
	tn.procs[0].awaitLine("cluster: joined")
}

// Under systemd's watchdog (the dist unit sets WatchdogSec), a cluster
// node tells systemd WATCHDOG=1 while its Raft loop runs, whether it has
// joined or not: alone, without a leader, it is alive (and not ready);
// once joined, READY=1 comes and the watchdog goes on.
func TestClusterWatchdog(t *testing.T) {
	tn := newOpsNodes(t)
	sock := newNotifySocket(t)
	tn.procs[0] = startDaemonEnv(t, "", []string{"NOTIFY_SOCKET=" + sock.path, "WATCHDOG_USEC=400000"}, "-config", tn.configs[0])
	if other := sock.awaitWatchdog(); len(other) > 0 {
		t.Fatalf("a node without a leader sent %q", other)
	}
	tn.start(1)
	if m := sock.next(); !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("sd_notify message %q, want READY=1", m)
	}
	if other := sock.awaitWatchdog(); len(other) > 0 {
		t.Fatalf("unexpected %q", other)
	}
}

// SIGHUP reloads a cluster node's configuration as it does a single
// node's: the leader applies limits.max_connections at once; followers
// keep what they reloaded and apply it when they come to lead.
func TestClusterReload(t *testing.T) {
	tn := startTestNodes(t)
	l := tn.leader()
	for i := range tn.names {
		f, err := os.OpenFile(tn.configs[i], os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("[limits]\nmax_connections = 1\n"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		tn.procs[i].cmd.Process.Signal(syscall.SIGHUP)
		tn.procs[i].awaitLine("configuration reloaded")
		if !strings.Contains(tn.procs[i].log(), `msg="reload: setting changed" key=limits.max_connections old=0 new=1`) {
			t.Fatalf("%s: no log line for the change:\n%s", tn.names[i], tn.procs[i].log())
		}
	}
	oneConnection := func(i int) {
		t.Helper()
		c1, err := amqp091.Dial(tn.url(i))
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		if c2, err := amqp091.Dial(tn.url(i)); err == nil {
			c2.Close()
			t.Fatalf("a second connection through %s was accepted with max_connections = 1", tn.names[i])
		}
	}
	oneConnection(l)
	tn.kill(l)
	oneConnection(tn.leader(l))
}

// Each node's metrics port serves that node's own metrics, not the
// leader's (its management port is forwarded): every node its store's
// and its Raft metrics, with brokerd_raft_is_leader 1 on the leader
// only, and the broker's (queues, connections) on the leader only.
func TestClusterMetricsPort(t *testing.T) {
	tn := newOpsNodes(t)
	var ports []string
	for i := range tn.names {
		ports = append(ports, rebindableAddr(t))
		f, err := os.OpenFile(tn.configs[i], os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "[metrics]\nlisten = %q\n", ports[i])
		f.Close()
	}
	for i := range tn.names {
		tn.start(i)
	}
	l := tn.leader()
	for i := range tn.names {
		tn.awaitJoined(i)
	}
	for i := range tn.names {
		fams := scrape(t, "http://"+ports[i]+"/metrics")
		f := fams["brokerd_raft_is_leader"]
		if f == nil {
			t.Fatalf("%s: no brokerd_raft_is_leader", tn.names[i])
		}
		if got, want := f.Metric[0].GetGauge().GetValue(), map[bool]float64{true: 1}[i == l]; got != want {
			t.Errorf("%s: brokerd_raft_is_leader %v, want %v", tn.names[i], got, want)
		}
		if fams["brokerd_wal_records_total"] == nil || fams["brokerd_raft_log_commit_index"] == nil {
			t.Errorf("%s: no store or Raft metrics", tn.names[i])
		}
		if (fams["brokerd_queues"] != nil) != (i == l) {
			t.Errorf("%s (leader %s): brokerd_queues present: %v", tn.names[i], tn.names[l], fams["brokerd_queues"] != nil)
		}
	}
}
