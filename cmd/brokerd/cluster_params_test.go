package main

import (
	"strings"
	"testing"
)

// Parameters are definitions: set through a follower (its API forwarded
// to the leader), they are replicated, and the next leader has them after
// the leader is killed; cluster_name is the cluster's.
func TestClusterParameters(t *testing.T) {
	tn := startOpsNodes(t)
	l := tn.leader()
	f := (l + 1) % 3
	tn.brokerctl(f, "set_global_parameter", "zone", `{"region":"eu"}`)
	tn.kill(l)
	l2 := tn.leader(l)
	survivor := l2
	var g map[string]any
	if err := tn.get(survivor, "/api/global-parameters/zone", &g); err != nil {
		t.Fatal(err)
	}
	if v, _ := g["value"].(map[string]any); v["region"] != "eu" {
		t.Fatalf("after the leader's kill, %s has zone = %v", tn.names[l2], g)
	}
	out := tn.brokerctl(survivor, "-q", "list_global_parameters")
	if !strings.Contains(out, "cluster_name\t\"brokerd\"") || !strings.Contains(out, "zone\t{\"region\":\"eu\"}") {
		t.Fatalf("list_global_parameters on %s:\n%s", tn.names[l2], out)
	}
}
