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
// # Ids
//
// A node's Raft id is a hash of the cluster's and the node's names
// (RaftID), the same in every node's configuration, so a static cluster
// bootstraps without exchanging ids. Message ids carry the group in their
// high 16 bits (diskstore.Replication).
package cluster
