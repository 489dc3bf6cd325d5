// Package deadletter holds the pure parts of dead-lettering: rewriting a
// message's properties when it is dead-lettered (x-death and the
// first/last-death headers), choosing the routing keys it is republished
// with, and cycle detection. It reads and writes AMQP field tables and knows
// nothing of queues or stores: the broker calls it and writes the result as
// one store operation.
//
// # Effects on the message (SPEC §2, reference B14–B21)
//
//   - x-death is an array of tables, most recent first, one per
//     {queue, reason}. An entry has, in this order: original-expiration
//     (longstr, only if the message had an expiration property at that
//     first death), count (long), reason (longstr), queue (longstr), time
//     (timestamp, seconds), exchange (longstr), routing-keys (array of
//     longstr: the publish key, then CC keys; BCC never appears).
//   - Dying again from the same queue for the same reason increments count
//     and moves the entry to the front; its other fields keep their
//     first-death values.
//   - x-first-death-{reason,queue,exchange} are set on the first death and
//     never changed; x-last-death-{reason,queue,exchange} on every death.
//   - The expiration property is removed (its value lives on in
//     original-expiration).
//   - With a dead-letter routing key the message is routed with exactly
//     that key and its CC header is removed; without one it is routed with
//     all its original keys (publish key, CC, BCC).
//   - A client-supplied x-death that is well formed (an array of tables)
//     is continued; a malformed one is replaced, and the message is then
//     treated as dying for the first time.
//
// # Cycles (B26–B28)
//
// A message dead-lettered for a reason other than rejected is not delivered
// to a target queue T when its history (after recording this death) has an
// entry for T and no entry from the most recent one up to and including
// T's most recent entry is a rejection. Rejections are client decisions, so
// a loop with one in it may legitimately go round forever.
package deadletter
