// Package shovel is brokerd's dynamic shovel: RabbitMQ's `shovel` runtime
// parameter, run over AMQP 0-9-1 (github.com/rabbitmq/amqp091-go) on both
// sides.
//
// A shovel consumes from a source — a queue, or an exchange through a
// server-named exclusive queue bound with src-exchange-key — and publishes
// every message to a destination: a queue (through the default exchange),
// an exchange (with dest-exchange-key, or the message's routing key), or,
// with neither, the exchange and routing key the message was delivered
// with, as RabbitMQ does. Either side is a remote broker (one URI of a
// list, picked at random per connect, the others tried when it fails) or
// this brokerd ("amqp://" or "amqp:///VHOST", through Options.Local: an
// in-process connection with every permission in the vhost; vhost "/"
// when the URI names none, as RabbitMQ, whatever the parameter's vhost).
//
// ParseDefinition validates a parameter value as RabbitMQ's
// rabbit_shovel_parameters and rabbit_amqp091_shovel do, with their
// texts; Manager runs the shovels, one goroutine each.
//
// # What is declared
//
// As RabbitMQ: a src-queue (and a dest-queue) is checked with a passive
// declaration and, when it does not exist, declared durable with
// src-queue-args (dest-queue-args), unless src-predeclared
// (dest-predeclared) says it must exist. Nothing else is declared.
//
// # States
//
//	starting    connecting, or waiting reconnect-delay after a failure
//	            (Status.Reason says which failure)
//	running     both sides connected and the consumer started;
//	            blocked_status "blocked" while the destination has sent
//	            connection.blocked (nothing is published until unblocked)
//	terminated  a failure with reconnect-delay 0, or src-delete-after
//	            reached (reason "autodelete"; Options.Deleted is called)
//
// # Guarantees per ack-mode
//
//   - on-confirm (default): the destination channel is in confirm mode and
//     a source delivery is acknowledged only once the destination confirmed
//     its publish (runs of confirms become one ack with multiple set); a
//     nack from the destination nacks the source delivery with requeue. A
//     message leaves the source only once the destination has it: none is
//     lost when either side, or the shovel, fails; a message published but
//     not yet confirmed when a side fails goes back to the source and is
//     forwarded again, so the destination may hold it twice, the second
//     copy flagged redelivered. At most src-prefetch-count publishes await
//     a confirm.
//   - on-publish: the source delivery is acknowledged once it is written to
//     the destination connection; a message the destination loses then (a
//     crash, a full queue's drop) is lost.
//   - no-ack: the source delivers without acknowledgements; a message in
//     flight when either side fails is lost. Nothing bounds what the
//     source sends ahead: while the destination is blocked it waits in the
//     client library's memory.
//
// # src-delete-after
//
// "queue-length" reads the source queue's message count (a passive
// declaration) when the shovel first connects, a number is that count;
// once that many messages are settled (confirmed, or published for
// on-publish and no-ack) the shovel stops and calls Options.Deleted.
// Deliveries beyond the count are left unacknowledged and go back to the
// source. Unlike RabbitMQ, which counts afresh when a worker reconnects,
// the count is kept across reconnects (a restart counts afresh), so that
// exactly that many messages move.
//
// # Message content
//
// Properties and headers are forwarded as amqp091-go decodes and encodes
// them: a property is sent when it is not its zero value, so a property
// present but empty (a content_type of "", a priority or timestamp of 0)
// is not forwarded, cluster_id is dropped, and header tables keep their
// values and types but not their field order. dest-publish-properties
// override the message's; dest-add-forward-headers prepends a table to the
// x-shovelled array header, dest-add-timestamp-header sets
// x-shovelled-timestamp (seconds, a long).
//
// # Concurrency
//
// Manager is safe for concurrent use. Each shovel's worker goroutine owns
// its connections and session state; worker.mu guards what Status reads.
// Lock order: Manager.opMu → Manager.mu; worker.mu is a leaf.
package shovel
