// Package replica replicates brokerd's store operations through Raft
// (go.etcd.io/raft/v3): a Group is one Raft group — the log of proposals
// one leader orders, committed once durable on a majority, applied in
// order by every member.
//
// This is issue 25's first piece of phase 1 (designs/replication.md): the
// driver of one group, which the node's Raft scheduler will run for every
// group it hosts and the store's replica layer will feed with encoded
// store batches. What it does not do yet is said where it matters:
// storage is a LogStorage the caller provides (a WAL-backed one comes with
// the disk store's record kinds and wal.ReadAt), and messages leave
// through a Transport the caller provides.
//
// # Driving a group
//
// A Group has no goroutine and takes no lock of its own: its owner calls
// Tick, Step, Propose and Process from one goroutine (a test's loop, or
// the node's scheduler), so a schedule of those calls decides everything
// it does. Process handles what Raft has ready, in etcd raft's order:
// the hard state and new entries are saved (Save returns once they are
// durable), then the messages are sent, then committed entries are
// applied, then the group advances.
//
// # Proposals, confirms and fencing
//
// Every proposal carries its proposer's term and a sequence number within
// that term (proposal.go). Propose succeeds only on the leader, and its
// done runs once the entry is applied here: committed, so durable on a
// majority. It runs with ErrLeadershipLost instead when this node stops
// being leader, or its term passes, before that: a proposal is never
// confirmed unless committed, though one failed this way may still
// commit (an AMQP nack promises nothing either way).
//
// An applied entry whose sequence is not the one after its term's last is
// a no-op: the leader's memory ran ahead assuming every proposal of its
// term lands in order, so a gap means that memory and the log disagree
// and nothing after the gap may apply. With etcd raft's RawNode a gap
// cannot arise within a term (a proposal is appended to the leader's log
// or refused at once), so the check is a guard, counted in Stats.
package replica
