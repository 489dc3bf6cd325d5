package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A proposal's entry data is a header and the payload:
//
//	version(1)=1 | uvarint(proposer term) | uvarint(seq) | payload
//
// seq counts the proposals of the proposer's term, from 1. Entries with no
// data are Raft's own (a new leader's empty entry) and carry no header.
const proposalVersion = 1 // on-disk format (Raft log entries); never renumber

// errCorruptProposal is wrapped by the error of an entry that does not
// decode: a bug, or a log this package did not write.
var errCorruptProposal = errors.New("replica: corrupt proposal")

// appendProposal appends the entry data of payload, proposed in term as
// its seq'th proposal, to dst.
func appendProposal(dst []byte, term, seq uint64, payload []byte) []byte {
	dst = append(dst, proposalVersion)
	dst = binary.AppendUvarint(dst, term)
	dst = binary.AppendUvarint(dst, seq)
	return append(dst, payload...)
}

// decodeProposal splits entry data into its header and payload (which
// aliases data).
func decodeProposal(data []byte) (term, seq uint64, payload []byte, err error) {
	if len(data) == 0 || data[0] != proposalVersion {
		return 0, 0, nil, fmt.Errorf("%w: version", errCorruptProposal)
	}
	rest := data[1:]
	term, n := binary.Uvarint(rest)
	if n <= 0 {
		return 0, 0, nil, fmt.Errorf("%w: term", errCorruptProposal)
	}
	rest = rest[n:]
	seq, n = binary.Uvarint(rest)
	if n <= 0 || seq == 0 {
		return 0, 0, nil, fmt.Errorf("%w: seq", errCorruptProposal)
	}
	return term, seq, rest[n:], nil
}
