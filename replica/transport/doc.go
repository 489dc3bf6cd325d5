// Package transport carries Raft messages (go.etcd.io/raft/v3's
// raftpb.Message) between the nodes of a brokerd cluster over TCP: one
// listening port per node ([cluster] listen), several Raft groups sharing
// every connection (issue 25, designs/replication.md 4.7 and 4.9).
//
// # Connections and streams
//
// Every node dials every peer twice, and only writes on what it dials:
// the small stream carries heartbeats, votes and every response; the
// bulk stream carries MsgApp (with entries or not), MsgSnap and
// forwarded proposals. A peer's messages to this node come on the
// connections it dialled. So each ordered pair of nodes has its own
// connections (a fault proxy per directed link breaks exactly one way),
// and a heartbeat never waits behind megabytes of appends: it is on
// another TCP connection, whose socket buffer the appends do not fill.
// Two connections rather than one with a priority queue because a
// priority queue orders only what has not been written yet — the bytes
// of appends already in the kernel's send buffer (up to megabytes) and
// the frame being written still go first, and that head-of-line wait is
// what causes spurious elections. All MsgApp go on one stream so that a
// follower sees a leader's appends in the order they were sent (out of
// order, it rejects them and the leader falls back to probing); Raft
// tolerates the reordering between the two streams.
//
// # Client connection streams
//
// A third kind of connection carries one proxied client connection (in
// cluster mode a follower hands its AMQP and HTTP clients' connections
// whole to the leader): DialConn dials the peer on demand and makes the
// same handshake — TLS, hello, welcome or refuse, the same cluster, name
// and id checks — with stream 3 in the hello, which adds the service
// ("amqp", "http": 1 to 32 bytes) and the original client's address (at
// most 256 bytes; empty if unknown). After the welcome the connection
// carries the client's raw bytes both ways: no frames, no bound on their
// size, no pings or pongs (the client's protocol has its own heartbeats),
// no deadline but the ones its owner sets. Half-closes pass through
// (CloseWrite: TCP's FIN, or TLS's close_notify). The acceptor hands the
// connection to Config.OnConn, whose RemoteAddr is the original client's
// address, so the serving node logs and lists the real client; a node
// without OnConn refuses such streams. Each stream is one TCP
// connection, opened per client connection and closed with it; Close
// closes every one still open, dialled or accepted.
//
// # Frames
//
// Every frame, both ways:
//
//	length(4, big-endian: what follows) | type(1) | group(8, big-endian) | body
//
// Types (wire format; never renumbered): 1 hello, 2 welcome, 3 refuse,
// 4 msg (body: the raftpb.Message's protobuf encoding), 5 ping, 6 pong.
// A message frame's body is bounded by MaxFrameSize (default 256 MiB, above
// the largest store batch an entry holds); frames before a hello is
// accepted by 4 KiB. A frame over its bound closes its connection, with a
// log line, and nothing else; a reader allocates as the bytes arrive (1
// MiB at a time), so a length that lies costs it nothing.
//
// # Handshake
//
// The dialer's first frame is a hello: protocol version, stream (1 small,
// 2 bulk, 3 client connection; wire format, never renumbered), its Raft
// id, the cluster id, its node name, and the name of the node it meant to
// call; a client connection stream's adds its service and client address. The acceptor answers welcome (its id and name) or refuse with a
// reason and closes: another cluster id, a name not among its peers, a
// call meant for another node (a misconfigured address), an unsupported
// version, a Raft id that is another node's, or a client connection
// stream to a node without OnConn or with a bad service name. Refusals are logged on
// both sides. A node's Raft id is the same in every group; the transport
// learns each peer's from its handshakes (Peer.ID may fix it instead), and
// Send routes a message by its To.
//
// # Queues, drops and liveness
//
// Send never blocks on the network: each stream has a bounded queue
// (QueueMessages, QueueBytes) its goroutine drains. A message is dropped,
// and counted, when its queue is full, its stream is not connected, or its
// connection fails while it is queued; then ReportUnreachable tells the
// group's owner, at most every 100 ms per (group, peer), so Raft probes
// the peer. Raft retransmits what is lost. A MsgSnap's fate is reported
// (ReportSnapshot: written, or dropped), without which raft would wait on
// the snapshot forever. A failed stream redials after a jittered backoff
// doubling from MinBackoff to MaxBackoff.
//
// A dialer sends a ping when idle for KeepAlive; an acceptor sends a pong
// every KeepAlive. A side that hears nothing for DeadAfter closes the
// connection: a peer that died without a reset, or a black-holed path, is
// noticed within DeadAfter, not at TCP's minutes-long timeout.
//
// # TLS
//
// Config.TLS, if set, secures every connection with mutual TLS: the
// listener requires and verifies a client certificate and the dialer
// presents this node's. Wiring it to the config file ([cluster.tls], in
// the style of [amqp.tls]) is the owner's; off, as on loopback, by
// default.
//
// # Concurrency
//
// Per peer: two stream goroutines (dial, write) and a watcher of each
// connection's pongs; per accepted connection: a reader, which calls the
// Handler, and a pong beacon, or, for a client connection stream, the
// goroutine that calls OnConn (the connection is OnConn's after); one
// accept loop. Close stops them all and waits. DialConn runs on its
// caller's goroutine and starts none.
package transport
