package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// cluster_status on a single node (no /api/cluster): the one node, disc
// and running, named as the overview names it; no Raft section; the JSON
// form has rabbitmqctl's keys. A brokerd cluster's answer is tested in
// cmd/brokerd (TestClusterOperations) against three processes.
func TestClusterStatusSingleNode(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		var ov struct {
			Node        string `json:"node"`
			ClusterName string `json:"cluster_name"`
		}
		e.getJSON("/api/overview", &ov)
		out := e.ok("cluster_status")
		for _, want := range []string{
			"Cluster status of node " + ov.Node + " ...\n", "Basics\n\nCluster name: " + ov.ClusterName + "\n",
			"\nDisk Nodes\n\n" + ov.Node + "\n", "\nRunning Nodes\n\n" + ov.Node + "\n",
			"\nVersions\n\n" + ov.Node + ": ", "\nAlarms\n\n(none)\n", "\nNetwork Partitions\n\n(none)\n",
			"\nListeners\n\nNode: " + ov.Node + ", interface: ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("cluster_status lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "\nRaft\n") || strings.Contains(out, "Not known for") {
			t.Errorf("a single node's cluster_status has a Raft section or unknown alarms:\n%s", out)
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(e.ok("cluster_status", "--formatter", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"cluster_name": ov.ClusterName, "disk_nodes": "[" + ov.Node + "]",
			"running_nodes": "[" + ov.Node + "]", "ram_nodes": "[]", "alarms": "[]", "partitions": "map[]"} {
			if got := fmtAny(rep[k]); got != want {
				t.Errorf("json %s = %s, want %s", k, got, want)
			}
		}
		if _, ok := rep["raft"]; ok {
			t.Errorf("a single node's JSON has raft: %v", rep["raft"])
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "cluster_status", "x")
	})
}

func fmtAny(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	s := strings.NewReplacer(`"`, "", ",", " ", "{}", "map[]").Replace(string(b))
	return s
}
