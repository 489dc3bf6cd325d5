package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Cluster is the [cluster] table: this node's place in a brokerd cluster
// (issue 25). An absent table (no node_name, no peers) is a single node,
// as before clusters existed; see Enabled.
type Cluster struct {
	// NodeName is this node, one of Peers.
	NodeName string `toml:"node_name"`
	// Listen is the one TCP address Raft and every other inter-node
	// stream (proxied client connections) use.
	Listen string `toml:"listen"`
	// Peers are every node of the cluster, this one included, as
	// "name=host:port" (the host:port its Listen is reached at); see
	// PeerList.
	Peers []string `toml:"peers"`
	// Name is the cluster's name: a node of another cluster is refused at
	// the handshake (default "brokerd").
	Name string `toml:"name"`
	// Tick is Raft's tick; an election times out after ElectionTicks
	// ticks (randomised up to twice that), a leader sends heartbeats every
	// HeartbeatTicks.
	Tick           Duration `toml:"tick"`
	ElectionTicks  int      `toml:"election_ticks"`
	HeartbeatTicks int      `toml:"heartbeat_ticks"`
	// LogKeepBytes is how much of the Raft log a node keeps behind the
	// entries it applied (default 256 MiB): a node that was down catches
	// up from it; one further behind (up to four times this is kept for
	// it) is sent a snapshot of the store instead.
	LogKeepBytes ByteSize   `toml:"log_keep_bytes"`
	TLS          ClusterTLS `toml:"tls"`
}

// ClusterTLS is the [cluster.tls] table: mutual TLS between nodes, off
// while CertFile is empty. Each node presents CertFile as server and as
// client, and accepts a peer only with a certificate CAFile signs.
type ClusterTLS struct {
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
	CAFile   string `toml:"ca_file"`
}

// Enabled reports whether c makes this node part of a cluster: node_name
// or peers is set. Otherwise brokerd is a single node and the rest of the
// table is not used.
func (c Cluster) Enabled() bool { return c.NodeName != "" || len(c.Peers) > 0 }

// ClusterPeer is one entry of [cluster] peers.
type ClusterPeer struct {
	Name string // "n2"
	Addr string // host:port of its [cluster] listen
}

// PeerList parses Peers, in the order given. The error names the first
// entry that is not "name=host:port" with a valid name, a host and a
// numeric port, or a name given twice; Validate reports every one.
func (c Cluster) PeerList() ([]ClusterPeer, error) {
	out := make([]ClusterPeer, 0, len(c.Peers))
	seen := map[string]int{}
	for i, s := range c.Peers {
		p, err := parsePeer(s)
		if err != nil {
			return nil, fmt.Errorf("cluster.peers[%d]: %w", i, err)
		}
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("cluster.peers[%d]: node name %q given twice (also peers[%d])", i, p.Name, j)
		}
		seen[p.Name] = i
		out = append(out, p)
	}
	return out, nil
}

// nodeNameRE is what a node's name may be: it is sent in handshakes and
// logged, so printable and short of separators.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// maxNodeName bounds a node's and the cluster's name (they travel in every
// handshake, whose frame is bounded).
const maxNodeName = 255

func checkNodeName(s string) error {
	if len(s) > maxNodeName || !nodeNameRE.MatchString(s) {
		return fmt.Errorf("invalid name %q: want 1 to %d of A-Z a-z 0-9 . _ -", s, maxNodeName)
	}
	return nil
}

// parsePeer parses "name=host:port".
func parsePeer(s string) (ClusterPeer, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok {
		return ClusterPeer{}, fmt.Errorf("invalid peer %q: want name=host:port, such as \"n2=10.0.0.2:25672\"", s)
	}
	if err := checkNodeName(name); err != nil {
		return ClusterPeer{}, fmt.Errorf("peer %q: %w", s, err)
	}
	host, port, ok := splitListen(addr)
	if !ok || host == "" || port == 0 {
		return ClusterPeer{}, fmt.Errorf("peer %q: invalid address %q: want host:port with a host and a port from 1 to 65535, such as \"10.0.0.2:25672\"", s, addr)
	}
	return ClusterPeer{Name: name, Addr: addr}, nil
}

// MaxClusterTick is the longest [cluster] tick Validate accepts: beyond
// it an election would take minutes.
const MaxClusterTick = 10 * time.Second

func (c *Config) validateCluster(k *checker) {
	cl := &c.Cluster
	if err := checkNodeName(cl.Name); err != nil {
		k.addf("cluster.name", "%v", err)
	}
	if d := time.Duration(cl.Tick); d <= 0 || d > MaxClusterTick {
		k.addf("cluster.tick", "must be above 0s and at most %s, got %s", MaxClusterTick, d)
	}
	if cl.HeartbeatTicks < 1 {
		k.addf("cluster.heartbeat_ticks", "must be at least 1, got %d", cl.HeartbeatTicks)
	}
	if cl.LogKeepBytes <= 0 {
		k.addf("cluster.log_keep_bytes", "must be above 0, got %d", cl.LogKeepBytes)
	}
	if cl.ElectionTicks <= cl.HeartbeatTicks {
		k.addf("cluster.election_ticks", "must be more than heartbeat_ticks (%d), got %d", cl.HeartbeatTicks, cl.ElectionTicks)
	}
	t := &cl.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		k.add("cluster.tls.key_file", []string{"cluster.tls.key_file", "cluster.tls.cert_file"}, "required when cluster.tls.cert_file is set")
	case t.CertFile == "" && t.KeyFile != "":
		k.add("cluster.tls.cert_file", []string{"cluster.tls.cert_file", "cluster.tls.key_file"}, "required when cluster.tls.key_file is set")
	}
	if t.CAFile == "" && (t.CertFile != "" || t.KeyFile != "") {
		k.add("cluster.tls.ca_file", []string{"cluster.tls.ca_file", "cluster.tls.cert_file", "cluster.tls.key_file"}, "required when cluster.tls.cert_file is set: the CA that signs every node's certificate")
	}
	if t.CAFile != "" && t.CertFile == "" && t.KeyFile == "" {
		k.addf("cluster.tls.ca_file", "set without cert_file and key_file, which turn inter-node TLS on: set them too, or remove ca_file")
	}

	if !cl.Enabled() {
		// Listen or TLS alone would be ignored: say so rather than run a
		// single node the operator did not mean to.
		if cl.Listen != "" {
			k.add("cluster.node_name", []string{"cluster.listen"}, "required when cluster.listen is set (with cluster.peers); remove [cluster] for a single node")
		}
		return
	}
	nameOK := false
	if cl.NodeName == "" {
		k.add("cluster.node_name", []string{"cluster.node_name", "cluster.peers"}, "required in a cluster (cluster.peers is set)")
	} else if err := checkNodeName(cl.NodeName); err != nil {
		k.addf("cluster.node_name", "%v", err)
	} else {
		nameOK = true
	}
	if Disabled(cl.Listen) {
		k.add("cluster.listen", []string{"cluster.listen", "cluster.node_name"}, "required in a cluster: the host:port of Raft and inter-node traffic, such as \"0.0.0.0:25672\"")
	} else if _, _, ok := splitListen(cl.Listen); !ok {
		k.addf("cluster.listen", "invalid address %q: want host:port, such as \"0.0.0.0:25672\"", cl.Listen)
	}
	if len(cl.Peers) == 0 {
		k.add("cluster.peers", []string{"cluster.peers", "cluster.node_name"}, "required in a cluster: every node, this one included, as \"name=host:port\"")
		return
	}
	seen := map[string]int{}
	self := false
	for i, s := range cl.Peers {
		key := indexKey("cluster.peers", i)
		p, err := parsePeer(s)
		if err != nil {
			k.add(key, []string{key, "cluster.peers"}, "%v", err)
			continue
		}
		if j, dup := seen[p.Name]; dup {
			k.add(key, []string{key, "cluster.peers"}, "node name %q given twice (also cluster.peers[%d])", p.Name, j)
			continue
		}
		seen[p.Name] = i
		self = self || p.Name == cl.NodeName
	}
	// Only when the name and every entry are valid: otherwise this would
	// repeat their problem.
	if !self && nameOK && len(seen) == len(cl.Peers) {
		k.add("cluster.node_name", []string{"cluster.node_name", "cluster.peers"}, "%q is not among cluster.peers (%s): list every node, this one included", cl.NodeName, strings.Join(cl.Peers, ", "))
	}
}
