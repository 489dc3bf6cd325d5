package transport

import (
	"slices"
	"strings"
	"sync/atomic"
)

// Stats count what a transport did since New.
type Stats struct {
	// Sent messages were written to a connection (not necessarily
	// received); SentBytes counts their frames.
	Sent, SentBytes uint64
	// Received messages were handed to the Handler; ReceivedBytes counts
	// their frames.
	Received, ReceivedBytes uint64
	// Dropped messages were not sent: their queue was full, their peer
	// not connected, or they were queued when its connection failed.
	Dropped uint64
	// Unroutable messages were to a Raft id no peer has presented.
	Unroutable uint64
	// TooLarge messages encoded to more than MaxFrameSize and were not
	// sent.
	TooLarge uint64
	// Rejected messages arrived but were not handed on: their sender or
	// recipient was not the connection's, or their type is local to a
	// node.
	Rejected uint64
	// Connects and Disconnects count outbound connections made
	// (handshake accepted) and lost.
	Connects, Disconnects uint64
	// Refused counts inbound connections refused at the handshake,
	// ProtocolErrors those closed later for a malformed or oversized
	// frame.
	Refused, ProtocolErrors uint64
	// ConnsDialled and ConnsAccepted count client connection streams
	// opened by DialConn and handed to OnConn.
	ConnsDialled, ConnsAccepted uint64
}

type counters struct {
	sent, sentBytes, received, receivedBytes atomic.Uint64
	dropped, unroutable, tooLarge, rejected  atomic.Uint64
	connects, disconnects                    atomic.Uint64
	refused, protocolErrors                  atomic.Uint64
	connsDialled, connsAccepted              atomic.Uint64
}

// Stats returns the transport's counters. Safe for concurrent use.
func (t *Transport) Stats() Stats {
	c := &t.stats
	return Stats{
		Sent: c.sent.Load(), SentBytes: c.sentBytes.Load(),
		Received: c.received.Load(), ReceivedBytes: c.receivedBytes.Load(),
		Dropped: c.dropped.Load(), Unroutable: c.unroutable.Load(),
		TooLarge: c.tooLarge.Load(), Rejected: c.rejected.Load(),
		Connects: c.connects.Load(), Disconnects: c.disconnects.Load(),
		Refused: c.refused.Load(), ProtocolErrors: c.protocolErrors.Load(),
		ConnsDialled: c.connsDialled.Load(), ConnsAccepted: c.connsAccepted.Load(),
	}
}

// PeerStatus is one peer as this node sees it.
type PeerStatus struct {
	Name, Addr string
	ID         uint64 // 0 until the peer presented it
	// SmallUp and BulkUp: the outbound connections are established.
	SmallUp, BulkUp bool
	// SmallDropped and BulkDropped count the messages to the peer each
	// stream dropped (as Stats.Dropped).
	SmallDropped, BulkDropped uint64
}

// Peers returns every peer's status, by name. Safe for concurrent use.
func (t *Transport) Peers() []PeerStatus {
	out := make([]PeerStatus, 0, len(t.peers))
	for _, p := range t.peers {
		out = append(out, PeerStatus{
			Name: p.name, Addr: p.addr, ID: p.id.Load(),
			SmallUp: p.small.isUp(), BulkUp: p.bulk.isUp(),
			SmallDropped: p.small.dropped.Load(), BulkDropped: p.bulk.dropped.Load(),
		})
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}
