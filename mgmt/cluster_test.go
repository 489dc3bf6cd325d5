package mgmt_test

import (
	"fmt"
	"testing"

	"github.com/brokerd/brokerd/cluster"
	"github.com/brokerd/brokerd/mgmt"
)

// On a cluster node (Options.Cluster) /api/nodes lists every member with
// RabbitMQ's fields: the node answering (the leader) measured as on a
// single node, with cluster_links to the peers it reaches; a follower
// with what the leader knows (running: reachable from it). Each carries
// brokerd's raft object (id, leader, lag, last contact). The overview
// names the node and the cluster; /api/cluster gives the group as the
// leader sees it; /api/cluster-name is RabbitMQ's.
func TestClusterNodes(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{Cluster: leaderStatus, Node: mgmt.NodeOptions{DataDir: t.TempDir()}})
	list := a.must(200, "GET", "/nodes", nil).list(t)
	if len(list) != 3 {
		t.Fatalf("%d nodes, want 3: %v", len(list), list)
	}
	for i, want := range []struct {
		name    string
		running bool
		lag     float64
		leader  bool
	}{{"n1", true, 0, true}, {"n2", true, 0, false}, {"n3", false, 40, false}} {
		n := list[i]
		if n["name"] != want.name || n["type"] != "disc" || n["running"] != want.running || n["being_drained"] != false {
			t.Errorf("node %d: name %v type %v running %v being_drained %v, want %s disc %v false", i, n["name"], n["type"], n["running"], n["being_drained"], want.name, want.running)
		}
		raft, _ := n["raft"].(map[string]any)
		if raft == nil || raft["lag"] != want.lag || raft["leader"] != want.leader || raft["running"] != want.running ||
			raft["id"] != fmt.Sprintf("%016x", cluster.RaftID("brokerd", want.name)) {
			t.Errorf("node %s: raft %v", want.name, n["raft"])
		}
		if _, ok := n["partitions"].([]any); !ok {
			t.Errorf("node %s: partitions %v, want a list", want.name, n["partitions"])
		}
	}
	n1 := list[0]
	for _, k := range []string{"uptime", "mem_used", "fd_used", "os_pid", "db_dir", "sockets_used", "proc_used"} {
		if _, ok := n1[k]; !ok {
			t.Errorf("the answering node has no %s", k)
		}
	}
	links, _ := n1["cluster_links"].([]any)
	if len(links) != 1 || fmt.Sprint(links[0]) != "map[name:n2 peer_addr:127.0.0.1 peer_port:7002]" {
		t.Errorf("cluster_links %v, want n2 alone (n3 is unreachable)", n1["cluster_links"])
	}
	if _, ok := list[1]["uptime"]; ok {
		t.Errorf("a follower has an uptime the leader cannot know: %v", list[1])
	}
	if raft := list[2]["raft"].(map[string]any); raft["last_contact"].(float64) < 30000 || raft["match_index"] != 101.0 || raft["progress_state"] != "StateProbe" {
		t.Errorf("n3's raft %v", raft)
	}
	if n := a.must(200, "GET", "/nodes/n3", nil).object(t); n["name"] != "n3" || n["running"] != false {
		t.Errorf("/nodes/n3: %v", n)
	}
	a.must(404, "GET", "/nodes/n4", nil)

	ov := a.must(200, "GET", "/overview", nil).object(t)
	if ov["node"] != "n1" || ov["cluster_name"] != "brokerd" {
		t.Errorf("overview node %v cluster_name %v, want n1 brokerd", ov["node"], ov["cluster_name"])
	}
	if cn := a.must(200, "GET", "/cluster-name", nil).object(t); cn["name"] != "brokerd" {
		t.Errorf("cluster-name %v", cn)
	}
	c := a.must(200, "GET", "/cluster", nil).object(t)
	if c["cluster_name"] != "brokerd" || c["node"] != "n1" || c["leader"] != "n1" || c["term"] != 7.0 ||
		c["commit_index"] != 140.0 || c["applied_index"] != 139.0 || c["last_index"] != 141.0 || c["leader_changes"] != 3.0 {
		t.Errorf("/cluster: %v", c)
	}
	nodes, _ := c["nodes"].([]any)
	if len(nodes) != 3 {
		t.Fatalf("/cluster nodes %v", c["nodes"])
	}
	if n3 := nodes[2].(map[string]any); n3["name"] != "n3" || n3["address"] != "127.0.0.1:7003" || n3["running"] != false || n3["lag"] != 40.0 {
		t.Errorf("/cluster's n3: %v", n3)
	}
	if al, ok := c["alarms"].([]any); !ok || len(al) != 0 {
		t.Errorf("/cluster alarms %v, want []", c["alarms"])
	}
}

// A single node has no /api/cluster nor /api/cluster-name, and its
// overview and nodes are as before (TestNodes checks them).
func TestSingleNodeHasNoCluster(t *testing.T) {
	a := startAPI(t)
	a.must(404, "GET", "/cluster", nil)
	a.must(404, "GET", "/cluster-name", nil)
	ov := a.must(200, "GET", "/overview", nil).object(t)
	if ov["cluster_name"] != ov["node"] {
		t.Errorf("a single node's cluster_name %v, want its node name %v", ov["cluster_name"], ov["node"])
	}
	if n := a.must(200, "GET", "/nodes", nil).list(t); len(n) != 1 || n[0]["raft"] != nil || n[0]["cluster_links"] != nil {
		t.Errorf("a single node's /nodes: %v", n)
	}
}
