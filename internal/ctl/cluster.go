package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// clusterAPI is what cluster_status reads of brokerd's /api/cluster (a
// cluster node's; mgmt/cluster.go).
type clusterAPI struct {
	ClusterName   string        `json:"cluster_name"`
	Node          string        `json:"node"`
	Leader        string        `json:"leader"`
	Term          json.Number   `json:"term"`
	CommitIndex   json.Number   `json:"commit_index"`
	AppliedIndex  json.Number   `json:"applied_index"`
	LastIndex     json.Number   `json:"last_index"`
	LeaderChanges json.Number   `json:"leader_changes"`
	Nodes         []clusterNode `json:"nodes"`
}

// clusterNode is a member in /api/cluster, and cluster_status's JSON
// "raft" nodes: match_index and lag are known on the leader only (null
// otherwise), last_contact is milliseconds since the node answering last
// heard from it (null: never, or itself).
type clusterNode struct {
	Name          string       `json:"name"`
	Address       string       `json:"address"`
	Leader        bool         `json:"leader"`
	Running       bool         `json:"running"`
	LastContact   *json.Number `json:"last_contact"`
	MatchIndex    *json.Number `json:"match_index"`
	Lag           *json.Number `json:"lag"`
	ProgressState *string      `json:"progress_state"`
}

// apiNode is what cluster_status reads of /api/nodes (RabbitMQ's, and a
// single brokerd's).
type apiNode struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Running bool   `json:"running"`
}

// clusterReport is cluster_status's JSON output: rabbitmqctl
// cluster_status's keys (disk_nodes, running_nodes, versions, alarms,
// partitions, listeners by node, ...), plus brokerd's "raft" on a cluster
// node. Versions and listeners are the answering node's only: the
// management API tells no other node's. alarms_unknown lists the nodes
// whose alarms the answer cannot include (a brokerd leader does not know
// its followers').
type clusterReport struct {
	ClusterName     string                       `json:"cluster_name"`
	DiskNodes       []string                     `json:"disk_nodes"`
	RAMNodes        []string                     `json:"ram_nodes"`
	RunningNodes    []string                     `json:"running_nodes"`
	Versions        map[string]map[string]string `json:"versions"`
	MaintenanceMode map[string]string            `json:"maintenance_status"`
	Alarms          []alarm                      `json:"alarms"`
	AlarmsUnknown   []string                     `json:"alarms_unknown"`
	Partitions      map[string][]string          `json:"partitions"`
	Listeners       map[string][]statusListener  `json:"listeners"`
	FeatureFlags    []map[string]string          `json:"feature_flags"`
	Raft            *clusterRaft                 `json:"raft,omitempty"`
	node            string                       // the node answering
}

// clusterRaft is brokerd's own part of cluster_status: the Raft group as
// its leader sees it.
type clusterRaft struct {
	Leader        string        `json:"leader"`
	Term          json.Number   `json:"term"`
	CommitIndex   json.Number   `json:"commit_index"`
	AppliedIndex  json.Number   `json:"applied_index"`
	LastIndex     json.Number   `json:"last_index"`
	LeaderChanges json.Number   `json:"leader_changes"`
	Nodes         []clusterNode `json:"nodes"`
}

// clusterStatus: the cluster's nodes (every one disc), those running,
// who leads and how far behind each follower is (brokerd's /api/cluster),
// the alarms, listeners and version of the node answering. Against a
// single brokerd or RabbitMQ (no /api/cluster) the nodes come from
// /api/nodes, or are the overview's node alone when the user may not read
// /api/nodes (it needs the monitoring tag).
func clusterStatus(r *run, args []string) error {
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
		return err
	}
	rep := clusterReport{ClusterName: ov.ClusterName, RAMNodes: []string{}, DiskNodes: []string{}, RunningNodes: []string{},
		Versions: map[string]map[string]string{}, MaintenanceMode: map[string]string{}, AlarmsUnknown: []string{},
		Partitions: map[string][]string{}, Listeners: map[string][]statusListener{}, FeatureFlags: []map[string]string{},
		node: ov.Node}
	var cl clusterAPI
	err := r.c.get(r.ctx, apiPath("cluster"), &cl)
	var ae *apiError
	switch {
	case err == nil:
		rep.Raft = &clusterRaft{Leader: cl.Leader, Term: cl.Term, CommitIndex: cl.CommitIndex, AppliedIndex: cl.AppliedIndex,
			LastIndex: cl.LastIndex, LeaderChanges: cl.LeaderChanges, Nodes: cl.Nodes}
		if rep.Raft.Nodes == nil {
			rep.Raft.Nodes = []clusterNode{}
		}
		for _, n := range cl.Nodes {
			rep.DiskNodes = append(rep.DiskNodes, n.Name)
			if n.Running {
				rep.RunningNodes = append(rep.RunningNodes, n.Name)
			}
			if n.Name != cl.Node {
				rep.AlarmsUnknown = append(rep.AlarmsUnknown, n.Name)
			}
		}
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		if err := r.clusterFromNodes(&rep); err != nil {
			return err
		}
	default:
		return err
	}
	for _, n := range rep.DiskNodes {
		rep.MaintenanceMode[n] = "not under maintenance"
	}
	v := map[string]string{"rabbitmq_version": ov.RabbitVersion}
	if ov.ProductName != "" {
		v["product_name"], v["product_version"] = ov.ProductName, ov.ProductVersion
	}
	rep.Versions[ov.Node] = v
	if rep.Alarms, err = r.alarms(); err != nil {
		return err
	}
	rep.Listeners[ov.Node] = []statusListener{}
	for _, l := range ov.Listeners {
		iface := l.IPAddress
		if strings.Contains(iface, ":") {
			iface = "[" + iface + "]"
		}
		rep.Listeners[ov.Node] = append(rep.Listeners[ov.Node], statusListener{
			Node: l.Node, Protocol: l.Protocol, Interface: iface, Port: l.Port, Purpose: purpose(ov.ProductName, l.Protocol),
		})
	}
	if r.out.json {
		r.out.write(jsonText(rep) + "\n")
		return nil
	}
	r.out.info("Cluster status of node %s ...", ov.Node)
	printClusterStatus(r.out, rep)
	return nil
}

// clusterFromNodes fills rep's nodes from /api/nodes (a single brokerd,
// or RabbitMQ), or with the answering node alone when the user may not
// list nodes.
func (r *run) clusterFromNodes(rep *clusterReport) error {
	var nodes []apiNode
	err := r.c.get(r.ctx, apiPath("nodes"), &nodes)
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.status/100 == 4:
		nodes = []apiNode{{Name: rep.node, Type: "disc", Running: true}}
	default:
		return err
	}
	for _, n := range nodes {
		if n.Type == "ram" {
			rep.RAMNodes = append(rep.RAMNodes, n.Name)
		} else {
			rep.DiskNodes = append(rep.DiskNodes, n.Name)
		}
		if n.Running {
			rep.RunningNodes = append(rep.RunningNodes, n.Name)
		}
	}
	return nil
}

// printClusterStatus prints rep as rabbitmqctl cluster_status does, in
// its order and words, then brokerd's Raft section.
func printClusterStatus(p *printer, rep clusterReport) {
	var b strings.Builder
	list := func(title string, names []string) {
		fmt.Fprintf(&b, "\n%s\n\n", title)
		if len(names) == 0 {
			b.WriteString("(none)\n")
		}
		for _, n := range names {
			fmt.Fprintf(&b, "%s\n", n)
		}
	}
	fmt.Fprintf(&b, "Basics\n\nCluster name: %s\n", rep.ClusterName)
	list("Disk Nodes", rep.DiskNodes)
	if len(rep.RAMNodes) > 0 {
		list("RAM Nodes", rep.RAMNodes)
	}
	list("Running Nodes", rep.RunningNodes)
	fmt.Fprintf(&b, "\nVersions\n\n")
	for _, n := range rep.DiskNodes {
		v, ok := rep.Versions[n]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%s: unknown (the management API tells only the answering node's)\n", n)
		case v["product_name"] != "" && v["product_name"] != "RabbitMQ":
			fmt.Fprintf(&b, "%s: %s %s\n", n, v["product_name"], v["product_version"])
		default:
			fmt.Fprintf(&b, "%s: RabbitMQ %s\n", n, v["rabbitmq_version"])
		}
	}
	fmt.Fprintf(&b, "\nMaintenance status\n\n")
	for _, n := range rep.DiskNodes {
		fmt.Fprintf(&b, "%s: %s\n", n, rep.MaintenanceMode[n])
	}
	fmt.Fprintf(&b, "\nAlarms\n\n")
	if len(rep.Alarms) == 0 {
		b.WriteString("(none)\n")
	}
	for _, a := range rep.Alarms {
		switch a.Resource {
		case "memory":
			fmt.Fprintf(&b, "Memory alarm on node %s\n", a.Node)
		case "disk":
			fmt.Fprintf(&b, "Free disk space alarm on node %s\n", a.Node)
		default:
			fmt.Fprintf(&b, "Alarm %s on node %s\n", strings.TrimSpace(a.Type+" "+a.Resource), a.Node)
		}
	}
	if len(rep.AlarmsUnknown) > 0 {
		fmt.Fprintf(&b, "Not known for %s: the leader does not learn its followers' alarms\n", strings.Join(rep.AlarmsUnknown, ", "))
	}
	fmt.Fprintf(&b, "\nNetwork Partitions\n\n(none)\n")
	fmt.Fprintf(&b, "\nListeners\n\n")
	for _, n := range rep.DiskNodes {
		for _, l := range rep.Listeners[n] {
			fmt.Fprintf(&b, "Node: %s, interface: %s, port: %s, protocol: %s, purpose: %s\n", l.Node, l.Interface, l.Port, l.Protocol, l.Purpose)
		}
	}
	if rf := rep.Raft; rf != nil {
		fmt.Fprintf(&b, "\nRaft\n\n")
		leader := rf.Leader
		if leader == "" {
			leader = "(none known)"
		}
		fmt.Fprintf(&b, "Leader: %s, term: %s, commit index: %s, last index: %s, leader changes seen: %s\n",
			leader, rf.Term, rf.CommitIndex, rf.LastIndex, rf.LeaderChanges)
		for _, n := range rf.Nodes {
			role := "follower"
			if n.Leader {
				role = "leader"
			}
			fmt.Fprintf(&b, "Node: %s, role: %s, running: %t", n.Name, role, n.Running)
			if n.MatchIndex != nil && n.Lag != nil {
				fmt.Fprintf(&b, ", match index: %s, lag: %s entries", *n.MatchIndex, *n.Lag)
			} else {
				b.WriteString(", lag: unknown")
			}
			if n.LastContact != nil {
				fmt.Fprintf(&b, ", last contact: %s ms ago", *n.LastContact)
			}
			b.WriteString("\n")
		}
	}
	p.write(b.String())
}
