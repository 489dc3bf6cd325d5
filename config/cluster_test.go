package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Without a [cluster] table brokerd is a single node: Default, an empty
// file, the example and the generated dist file all leave Enabled false.
func TestClusterAbsentIsSingleNode(t *testing.T) {
	if Default().Cluster.Enabled() {
		t.Error("Default().Cluster.Enabled() = true")
	}
	for _, path := range []string{writeConfig(t, "[amqp]\nheartbeat = \"30s\"\n"), examplePath, distPath} {
		c, err := Load(path)
		if err != nil {
			t.Fatalf("Load(%s): %v", path, err)
		}
		if c.Cluster.Enabled() {
			t.Errorf("%s: Cluster.Enabled() = true: %+v", path, c.Cluster)
		}
		if peers, err := c.Cluster.PeerList(); err != nil || len(peers) != 0 {
			t.Errorf("%s: PeerList() = %v, %v; want none", path, peers, err)
		}
	}
}

// A whole [cluster] table loads; PeerList keeps the order given.
func TestClusterLoad(t *testing.T) {
	path := writeConfig(t, `
[cluster]
node_name = "n2"
listen = "0.0.0.0:25682"
peers = ["n1=127.0.0.1:25681", "n2=127.0.0.1:25682", "node-3.b_c=[::1]:25683"]
name = "prod"
tick = "50ms"
election_ticks = 20
heartbeat_ticks = 2
log_keep_bytes = "64MiB"

[cluster.tls]
cert_file = "/etc/brokerd/node.pem"
key_file = "/etc/brokerd/node.key"
ca_file = "/etc/brokerd/ca.pem"
`)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.Cluster = Cluster{
		NodeName: "n2", Listen: "0.0.0.0:25682",
		Peers: []string{"n1=127.0.0.1:25681", "n2=127.0.0.1:25682", "node-3.b_c=[::1]:25683"},
		Name:  "prod", Tick: Duration(50 * time.Millisecond), ElectionTicks: 20, HeartbeatTicks: 2, LogKeepBytes: 64 * MiB,
		TLS: ClusterTLS{CertFile: "/etc/brokerd/node.pem", KeyFile: "/etc/brokerd/node.key", CAFile: "/etc/brokerd/ca.pem"},
	}
	if got := stripOrigin(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("Load:\n got %+v\nwant %+v", got.Cluster, want.Cluster)
	}
	if !c.Cluster.Enabled() {
		t.Error("Enabled() = false")
	}
	peers, err := c.Cluster.PeerList()
	if err != nil {
		t.Fatal(err)
	}
	wantPeers := []ClusterPeer{{"n1", "127.0.0.1:25681"}, {"n2", "127.0.0.1:25682"}, {"node-3.b_c", "[::1]:25683"}}
	if !reflect.DeepEqual(peers, wantPeers) {
		t.Errorf("PeerList() = %v; want %v", peers, wantPeers)
	}

	// One node alone is a cluster too (of one), as is an even count.
	for _, text := range []string{
		"[cluster]\nnode_name = \"a\"\nlisten = \":25672\"\npeers = [\"a=h1:25672\"]\n",
		"[cluster]\nnode_name = \"a\"\nlisten = \":25672\"\npeers = [\"a=h1:25672\", \"b=h2:25672\"]\n",
	} {
		if _, err := Load(writeConfig(t, text)); err != nil {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// Each case is a file with a [cluster] problem; the error is exactly the
// lines given, naming the file, the line and the key.
func TestClusterProblems(t *testing.T) {
	const ok = "[cluster]\nnode_name = \"n1\"\nlisten = \"127.0.0.1:25681\"\npeers = [\"n1=127.0.0.1:25681\", \"n2=127.0.0.1:25682\"]\n"
	tests := []struct {
		name string
		text string
		want string // after "FILE:"; FILE stands for the file's path
	}{
		{"peers without node_name", "[cluster]\nlisten = \":25681\"\npeers = [\"n1=h:1\"]\n", `3: cluster.node_name: required in a cluster (cluster.peers is set)`},
		{"node_name without listen", "[cluster]\nnode_name = \"n1\"\npeers = [\"n1=h:1\"]\n", `2: cluster.listen: required in a cluster: the host:port of Raft and inter-node traffic, such as "0.0.0.0:25672"`},
		{"node_name without peers", "[cluster]\nnode_name = \"n1\"\nlisten = \":25681\"\n", `2: cluster.peers: required in a cluster: every node, this one included, as "name=host:port"`},
		{"listen alone", "[cluster]\n\nlisten = \":25681\"\n", `3: cluster.node_name: required when cluster.listen is set (with cluster.peers); remove [cluster] for a single node`},
		{"bad listen", strings.Replace(ok, `"127.0.0.1:25681"`, `"25681"`, 1), `3: cluster.listen: invalid address "25681": want host:port, such as "0.0.0.0:25672"`},
		{"listen off", strings.Replace(ok, `"127.0.0.1:25681"`, `"off"`, 1), `3: cluster.listen: required in a cluster: the host:port of Raft and inter-node traffic, such as "0.0.0.0:25672"`},
		{"listen on amqp's port", strings.Replace(ok, `listen = "127.0.0.1:25681"`, `listen = "127.0.0.1:5672"`, 1), `3: cluster.listen: "127.0.0.1:5672" conflicts with amqp.listen = "0.0.0.0:5672": same port`},
		{"peer without =", "[cluster]\nnode_name = \"n1\"\nlisten = \":1\"\npeers = [\n  \"n1=h:1\",\n  \"n2:h:2\",\n]\n", `6: cluster.peers[1]: invalid peer "n2:h:2": want name=host:port, such as "n2=10.0.0.2:25672"`},
		{"peer without port", strings.Replace(ok, `"n2=127.0.0.1:25682"`, `"n2=127.0.0.1"`, 1), `4: cluster.peers[1]: peer "n2=127.0.0.1": invalid address "127.0.0.1": want host:port with a host and a port from 1 to 65535, such as "10.0.0.2:25672"`},
		{"peer without host", strings.Replace(ok, `"n2=127.0.0.1:25682"`, `"n2=:25682"`, 1), `4: cluster.peers[1]: peer "n2=:25682": invalid address ":25682": want host:port with a host and a port from 1 to 65535, such as "10.0.0.2:25672"`},
		{"peer port 0", strings.Replace(ok, `"n2=127.0.0.1:25682"`, `"n2=127.0.0.1:0"`, 1), `4: cluster.peers[1]: peer "n2=127.0.0.1:0": invalid address "127.0.0.1:0": want host:port with a host and a port from 1 to 65535, such as "10.0.0.2:25672"`},
		{"peer name with a space", strings.Replace(ok, `"n2=`, `"n 2=`, 1), `4: cluster.peers[1]: peer "n 2=127.0.0.1:25682": invalid name "n 2": want 1 to 255 of A-Z a-z 0-9 . _ -`},
		{"empty peer name", strings.Replace(ok, `"n2=`, `"=`, 1), `4: cluster.peers[1]: peer "=127.0.0.1:25682": invalid name "": want 1 to 255 of A-Z a-z 0-9 . _ -`},
		{"duplicate peer", strings.Replace(ok, `"n2=`, `"n1=`, 1), `4: cluster.peers[1]: node name "n1" given twice (also cluster.peers[0])`},
		{"node_name not a peer", strings.Replace(ok, `node_name = "n1"`, `node_name = "n3"`, 1), `2: cluster.node_name: "n3" is not among cluster.peers (n1=127.0.0.1:25681, n2=127.0.0.1:25682): list every node, this one included`},
		{"bad node_name", strings.Replace(ok, `node_name = "n1"`, `node_name = "n/1"`, 1), `2: cluster.node_name: invalid name "n/1": want 1 to 255 of A-Z a-z 0-9 . _ -`},
		{"empty cluster name", ok + "name = \"\"\n", `5: cluster.name: invalid name "": want 1 to 255 of A-Z a-z 0-9 . _ -`},
		{"zero tick", ok + "tick = \"0s\"\n", `5: cluster.tick: must be above 0s and at most 10s, got 0s`},
		{"long tick", ok + "tick = \"11s\"\n", `5: cluster.tick: must be above 0s and at most 10s, got 11s`},
		{"election not above heartbeat", ok + "election_ticks = 2\nheartbeat_ticks = 2\n", `5: cluster.election_ticks: must be more than heartbeat_ticks (2), got 2`},
		{"zero heartbeat", ok + "heartbeat_ticks = 0\n", `5: cluster.heartbeat_ticks: must be at least 1, got 0`},
		{"zero log keep", ok + "log_keep_bytes = 0\n", `5: cluster.log_keep_bytes: must be above 0, got 0`},
		{"cert without key", ok + "[cluster.tls]\ncert_file = \"c\"\nca_file = \"ca\"\n", `6: cluster.tls.key_file: required when cluster.tls.cert_file is set`},
		{"key without cert", ok + "[cluster.tls]\nkey_file = \"k\"\nca_file = \"ca\"\n", `6: cluster.tls.cert_file: required when cluster.tls.key_file is set`},
		{"tls without ca", ok + "[cluster.tls]\ncert_file = \"c\"\nkey_file = \"k\"\n", `6: cluster.tls.ca_file: required when cluster.tls.cert_file is set: the CA that signs every node's certificate`},
		{"ca alone", ok + "[cluster.tls]\nca_file = \"ca\"\n", `6: cluster.tls.ca_file: set without cert_file and key_file, which turn inter-node TLS on: set them too, or remove ca_file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.text)
			_, err := Load(path)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load error = %v (%T); want *ValidationError", err, err)
			}
			if got, want := err.Error(), path+":"+strings.ReplaceAll(tt.want, "FILE", path); got != want {
				t.Errorf("error:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// PeerList's errors name the entry, as Validate's do, for a Cluster built
// without Validate.
func TestClusterPeerListErrors(t *testing.T) {
	for _, tc := range []struct {
		peers []string
		want  string
	}{
		{[]string{"a=h:1", "b"}, `cluster.peers[1]: invalid peer "b": want name=host:port`},
		{[]string{"a=h:1", "a=h:2"}, `cluster.peers[1]: node name "a" given twice (also peers[0])`},
		{[]string{"a=h:x"}, `cluster.peers[0]: peer "a=h:x": invalid address "h:x"`},
	} {
		_, err := Cluster{Peers: tc.peers}.PeerList()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("PeerList(%q) = %v; want an error starting %q", tc.peers, err, tc.want)
		}
	}
}
