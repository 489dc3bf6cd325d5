// Package cluster runs a brokerd node as a member of a cluster
// ([cluster] in the config file; designs/replication.md, phase 1): every
// durable queue and definition is in one Raft group (DataGroup), whose
// leader runs the broker; the other nodes apply what the group commits and
// forward client connections to the leader.
//
// # The store is the state machine, the WAL is the log
//
// A Node opens the disk store in replicated mode (diskstore.Replication):
// the group's Raft log is kept in the store's own WAL (raftLog: entry and
// hard state records, one fsync per Raft cycle for everything), and the
// store applies what the group commits. On the leader the broker's Apply
// changes the store's memory at once, as on a single node, and queues the
// batch for the next proposal; the batch's done (a publisher confirm, a
// declare-ok) runs only when the entry holding it is committed — durable
// on a majority. A follower applies each committed entry's batches
// (ApplyEntry). A checkpoint writes only what is committed, with the
// group's applied index, in its one index batch; the log keeps the entries
// after it (and those a follower still needs), and WAL files go once no
// record in them is needed.
//
// # Leadership
//
// A node serves (Config.Serve: the broker over the store) once it leads
// and has applied an entry of its own term, so the store holds every
// committed entry. When it stops leading, the store's memory may hold
// batches the group will never commit: serving stops (the broker closes
// its connections; their unconfirmed publishes are never confirmed), and
// the node abandons the store and opens it again, which recovers exactly
// what was committed (an incarnation per opening). Proposals fail with
// replica.ErrLeadershipLost meanwhile.
//
// Deliveries need no commit (the delivered mark is written ahead of
// them), so a leader delivers only under a lease a quorum confirmed in
// the last fifth of an election timeout (lease.go): a leader cut off or
// paused while another is elected has stopped delivering before the
// other can be, because members withhold their votes for a while after
// they last heard a leader.
//
// # Status
//
// Node.Status is what the node knows of the group, for the management
// API, brokerctl cluster_status and the Raft metrics (status.go): the
// term, the leader, the commit, applied and last index, every member
// (reachable: its transport streams connected and a Raft message heard
// within an election timeout; its last contact; on the leader, its match
// index and lag behind the leader's last index), and counters (elections
// seen won, this node's proposals committed and their propose-to-commit
// latency). Only the leader knows its followers' progress; right after an
// election it has confirmed nothing of a member it has not heard from.
//
// # Snapshots
//
// The log keeps Config.LogKeepBytes of entries behind the applied one,
// and what members behind still need up to four times that. A member
// further behind — down longer than that, or restarted with an empty data
// directory under its name (a replaced disk) — catches up from a snapshot
// of the store (snapshot.go), without stopping the others:
//
//   - Leader. raft asks the log for a snapshot (raftLog.Snapshot, on the
//     loop, never blocking): it gets the latest one at or after the
//     compaction point — its entry, term and membership, and its id as
//     the data — or, while none is, ErrSnapshotTemporarilyUnavailable and
//     one is made in the background: diskstore's CreateSnapshot (a
//     checkpoint, then the index copied and the segment files linked)
//     into Dir/snapshots/<term>-<index>, with a meta file holding the log's
//     entry at that index and the term before it. The latest two are kept
//     until no member needs them for a minute (their links hold segment
//     files the store removed since); Open removes them all (caches).
//   - Transfer. The follower fetches the files over a client connection
//     stream of service "snapshot" (transport.DialConn; the node's OnConn
//     serves it and hands other services to Config.OnConn): its request
//     names the snapshot, the answer streams each file with its size and
//     CRC-32C, checked on receipt. raft is told the MsgSnap was sent once
//     the transport wrote it (ReportSnapshot), and probes the follower
//     until it answers from the snapshot's entry on.
//   - Follower. The transport handler takes a MsgSnap for entries the
//     member has not committed before raft sees it (replica.Group has no
//     snapshot handling) and hands it to supervise, one at a time: the
//     files are fetched into Dir/snapshot.recv while the member runs on,
//     then the incarnation stops, diskstore's IngestSnapshot replaces the
//     store (crash-safe: the old store or the new one), its log starting
//     with the snapshot's entry (so the group's fencing knows the last
//     applied proposal) and its hard state keeping the member's term and
//     vote with the commit at the snapshot's entry, and the store is
//     opened again. A fetch that fails leaves the old store running; the
//     leader sends the snapshot again.
//   - Replaced disk. A member that bootstrapped an empty log gets
//     heartbeats from a leader that believes it holds what it acknowledged
//     before (raft would panic on their commit). The handler takes such a
//     heartbeat as the sign: the member asks the leader for a snapshot at
//     or after that commit (made for it if need be) and installs it the
//     same way, taking its vote in the leader's term as the leader's (its
//     votes before the wipe are lost: voting again for that term's leader
//     never elects a second one).
//   - Catching up (rejoin.go). A member that started with an empty log
//     votes only for candidates holding nothing but the bootstrap entries
//     until its commit reaches the one the leader first told it: with the
//     acknowledgements of its lost disk counted in commits, it and a
//     member that is behind would otherwise elect a leader lacking them.
//
// # One group, for now
//
// The design brief's phase 1 has a metadata group for definitions beside
// the data group. Here both are one group (DataGroup): with every member
// in both and a whole client connection proxied to one node, two groups
// would add a second election whose leader could differ from the data
// group's, and the broker would need in-broker forwarding (phase 2) to
// serve a declare on one node and its queue's publishes on another;
// ordering between a definition and the messages after it (declare then
// publish, a queue deleted with its messages) would span two logs. One
// log gives that order, one leader to proxy to and one fsync per cycle.
// The seams for more groups are kept: entries name their group, message
// ids carry it, the store keeps each group's applied state under its own
// key (index.GroupState), and queue state is kept apart from queue
// definitions (defs' queue-state record). A single node (no [cluster])
// does not go through a group at all: the store applies at once, as
// before replication, which is what keeps its figures where they were.
//
// # Ids
//
// A node's Raft id is a hash of the cluster's and the node's names
// (RaftID), the same in every node's configuration, so a static cluster
// bootstraps without exchanging ids. Message ids carry the group in their
// high 16 bits (diskstore.Replication).
package cluster
