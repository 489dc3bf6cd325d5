package mgmt

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/cluster"
)

// A cluster node's management API (Options.Cluster set). In phase 1 of
// replication only the leader serves the API (a follower forwards its
// HTTP connections to it), so the node answering is the leader and
// answers for the cluster from what it knows (cluster.Status):
//
//	/api/overview     node: this node's [cluster] node_name; cluster_name: [cluster] name
//	/api/nodes        every member, in the configuration's order. The
//	                  answering node as on a single node, plus
//	                  cluster_links (each reachable peer: name, peer_addr,
//	                  peer_port); another member only with what the
//	                  leader knows of it: name, type "disc", running
//	                  (reachable from the leader: connected, and heard
//	                  from within an election timeout), being_drained
//	                  false, cluster_links and partitions [] (RabbitMQ's
//	                  answer for a node whose statistics it has not).
//	                  Each has brokerd's own "raft" object (raftJSON).
//	/api/cluster      brokerd's own: the group as the leader sees it
//	                  (clusterJSON), for brokerctl cluster_status
//	/api/cluster-name RabbitMQ's: {"name": [cluster] name}
//
// On a single node /api/cluster and /api/cluster-name are 404 and the
// other answers are unchanged.

func (s *Server) clusterRoutes() {
	s.handle("GET /api/cluster", monitoring, s.clusterInfo)
	s.handle("GET /api/cluster-name", management, s.getClusterName)
}

// clusterStatus returns the cluster node's status; false on a single
// node.
func (s *Server) clusterStatus() (cluster.Status, bool) {
	if s.opts.Cluster == nil {
		return cluster.Status{}, false
	}
	return s.opts.Cluster(), true
}

func (s *Server) getClusterName(u *broker.UserInfo, r *http.Request) (any, error) {
	st, ok := s.clusterStatus()
	if !ok {
		return nil, notFound()
	}
	return map[string]any{"name": st.Cluster}, nil
}

// raftJSON is a member's "raft" object in /api/nodes: its Raft id (hex,
// as the logs print it; a JSON number would lose digits), whether it
// leads and is this node, running (as the node's), last_contact
// (milliseconds since this node last heard from it; null: not since this
// node started, or this node itself), and, known on the leader only,
// match_index, lag (the leader's last index less match_index) and
// progress_state (raft's: "StateReplicate", "StateProbe", "StateSnapshot";
// null elsewhere).
func raftJSON(st cluster.Status, m cluster.Member, now time.Time) map[string]any {
	out := map[string]any{
		"id": fmt.Sprintf("%016x", m.ID), "leader": m.Leader, "self": m.Self, "running": m.Reachable,
		"last_contact": nil, "match_index": nil, "lag": nil, "progress_state": nil,
	}
	if !m.LastContact.IsZero() {
		out["last_contact"] = now.Sub(m.LastContact).Milliseconds()
	}
	if m.Tracked {
		out["match_index"], out["lag"], out["progress_state"] = m.Match, m.Lag, m.ProgressState
	}
	return out
}

// clusterNodes is /api/nodes on a cluster node: every member (see above).
func (s *Server) clusterNodes(st cluster.Status, r *http.Request) ([]map[string]any, error) {
	now := time.Now()
	var out []map[string]any
	for _, m := range st.Members {
		var n map[string]any
		if m.Self {
			var err error
			if n, err = s.nodeJSON(r); err != nil {
				return nil, err
			}
			links := []map[string]any{}
			for _, p := range st.Members {
				if p.Self || !p.Reachable {
					continue
				}
				host, port, _ := net.SplitHostPort(p.Addr)
				pn, _ := strconv.Atoi(port)
				links = append(links, map[string]any{"name": p.Name, "peer_addr": host, "peer_port": pn})
			}
			n["cluster_links"] = links
		} else {
			n = map[string]any{"name": m.Name, "type": "disc", "running": m.Reachable, "being_drained": false,
				"cluster_links": []any{}, "partitions": []any{}}
		}
		n["raft"] = raftJSON(st, m, now)
		out = append(out, n)
	}
	return out, nil
}

// clusterInfo is GET /api/cluster, brokerd's own: cluster_name, node (the
// node answering, which leads), leader ("" while none is known), term,
// commit_index, applied_index and last_index of the answering node's
// log, leader_changes (elections it saw won since it started), nodes
// (each member: name, address, and raftJSON's fields) and alarms (the
// answering node's own, as /api/health/checks/alarms lists them; a
// follower's alarms are not known to the leader in phase 1).
func (s *Server) clusterInfo(u *broker.UserInfo, r *http.Request) (any, error) {
	st, ok := s.clusterStatus()
	if !ok {
		return nil, notFound()
	}
	now := time.Now()
	nodes := []map[string]any{}
	for _, m := range st.Members {
		n := raftJSON(st, m, now)
		n["name"], n["address"] = m.Name, m.Addr
		nodes = append(nodes, n)
	}
	alarms := []map[string]any{}
	for _, a := range s.b.Alarms() {
		alarms = append(alarms, map[string]any{"node": st.Name, "resource": a})
	}
	return map[string]any{
		"cluster_name": st.Cluster, "node": st.Name, "leader": st.LeaderName, "term": st.Term,
		"commit_index": st.Commit, "applied_index": st.Applied, "last_index": st.LastIndex,
		"leader_changes": st.LeaderChanges, "nodes": nodes, "alarms": alarms,
	}, nil
}
