// Package defs is the durable form of brokerd's definitions: the records
// of vhosts, users, permissions, exchanges, queues (and their state),
// bindings, policies, operator policies and redrive tasks in the store's
// meta space (store.MetaOp, Store.ScanMeta), and the few marks beside
// them.
//
// It holds the key layout and a codec per record kind over plain value
// structs (VHost, User, Perm, Exchange, Queue, Binding, Policy), never the
// broker's live objects: the broker builds a value from its object under
// that object's lock and hands it here. Each EncodeX returns the record
// (key and value) that stores a value, and DecodeX is its exact mirror,
// from the key and value Store.ScanMeta gives back. The package has no
// locks, keeps no state and does no I/O, so every function is safe for
// concurrent use. An encoder only reads its value, and keeps nothing of it
// after it returns; a decoded value shares no memory with the key and
// value it came from, so the caller owns it.
//
// Records are the on-disk format of existing data directories: nothing
// here may change a byte of what an earlier brokerd wrote or read it
// differently (golden_test.go pins each kind's bytes).
//
// Names are bytes: AMQP short strings need not be UTF-8 and may contain
// NUL, and a name comes back from the store exactly as it was declared.
//
// # Keys
//
// A key is a kind prefix followed by name parts:
//
//	v/ <vhost>                      PrefixVHost
//	x/ <vhost> <exchange>           PrefixExchange
//	q/ <vhost> <queue>              PrefixQueue
//	b/ <vhost> <source> <"q"|"x"> <destination> <routing key> <args>
//	                                PrefixBinding
//	p/ <vhost> <policy>             PrefixPolicy
//	o/ <vhost> <operator policy>    PrefixOperatorPolicy
//	a/ <vhost> <user>               PrefixPerm: a user's permissions in a vhost
//	r/ <vhost> <component> <name>   PrefixParameter: a runtime parameter
//	g/ <name>                       PrefixGlobalParameter: a global parameter
//	u/ <user>                       PrefixUser
//	t/ <task>                       PrefixRedriveTask (the broker's redrive tasks)
//	f/ <task> <seq: %016x>          PrefixRedriveFailure
//	s/ <queue id: %016x>            PrefixQueueState: a queue's mutable state
//	vl/ <vhost>                     PrefixVHostLimits: a vhost's limits
//	ul/ <user>                      PrefixUserLimits: a user's limits
//	tp/ <vhost> <user> <exchange>   PrefixTopicPerm: a user's topic permissions
//	n/queue-id                      KeyQueueIDMark (no parts)
//	n/bootstrapped                  KeyBootstrapMark (no parts)
//
// Each part is its bytes with every 0x00 written as 0x00 0xff, then the
// terminator 0x00 0x01:
//
//	part := ( byte != 0x00 | 0x00 0xff )* 0x00 0x01
//
// So no part's encoding is a prefix of another's: keys of different tuples
// never collide, and a vhost's keys of one kind are exactly those starting
// with the kind and the vhost's part (ScanMeta by Key(kind, vhost) lists
// them). The encoding keeps byte order, so definitions come back sorted by
// name. <args> is the binding's argument table in its AMQP encoding, part
// of the binding's identity (RabbitMQ's too).
//
// Every kind whose first part is the vhost is listed by VHostPrefixes:
// deleting a vhost deletes every record under each of those prefixes.
//
// # Values
//
// Every value starts with a version byte (Version). Then, with
// bytes := uvarint(len) || len bytes:
//
//	vhost     [bytes(description) bytes(default queue type) uvarint(n) bytes(tag)*n]
//	          (a vhost written before metadata existed has none: all empty)
//	exchange  bytes(type) flags(1: bit 0 auto-delete, bit 1 internal) bytes(args)
//	queue     uvarint(queue id) flags(1: bit 0 auto-delete, bit 1 backlog) bytes(args)
//	          [uvarint(n) uvarint(mark)*n]  delivered marks by priority level
//	          (written before state records: the broker now writes neither
//	          the backlog flag nor marks here, and reads them only for a
//	          queue that has no state record)
//	state     flags(1: bit 1 backlog) [uvarint(n) uvarint(mark)*n]
//	binding   (nothing: the key says it all)
//	policy    the JSON document {"pattern","apply-to","priority","definition"}
//	          (operator policies alike)
//	queue-id  uvarint(highest queue id ever given to a durable queue)
//	user      bytes(hashing algorithm) bytes(password hash) uvarint(n) bytes(tag)*n
//	          the algorithm by RabbitMQ's name (rabbit_password_hashing_sha256);
//	          the hash as raw bytes, salt first; empty: the user has no password
//	permission bytes(configure) bytes(write) bytes(read), the regexes' sources
//	parameter  the value's JSON, compacted (global parameters alike)
//	limits    uvarint(n) (bytes(name) varint(value))*n, sorted by name; the
//	          value zigzag (RabbitMQ's -1: no limit is not stored)
//	topic permission bytes(write) bytes(read), the regexes' sources
//	bootstrapped (nothing): the broker's bootstrap vhosts and users were created
//
// The redrive task records (t/, f/) are the broker's own (its
// redrivetask.go); their prefixes are listed here so the key space has one
// table.
//
// A queue's backlog flag was set, by a layout before the stored backlog
// range, while dead letters waited for a route among its entries: recovery
// then reads its entries instead of only its counters. Nothing sets it any
// more; the broker clears it once such a backlog drains.
//
// Argument tables are in their AMQP encoding, so they come back bit for
// bit. A decoder accepts trailing bytes after the fields it knows (a later
// version may append fields) but nothing shorter. So decoding is not
// injective: bytes a decoder accepts re-encode to the canonical record
// (without the trailing bytes, with minimal varints, known flag bits only,
// no all-zero marks, policy JSON as encoding/json writes it), which decodes
// to the same value.
//
// # Errors
//
// Every error a decoder returns wraps ErrCorrupt: the store holds
// something this package did not write.
//
// # Adding a record kind
//
// A new kind of definition gets a prefix here (a new one: prefixes are
// never reused or renumbered), a value struct with its key's names in it,
// EncodeX/DecodeX (and XKey for its deletion) in records.go, a golden in
// golden_test.go and a round-trip fuzzer in fuzz_test.go; if its first
// part is the vhost, it joins VHostPrefixes. The broker converts its live
// object to the value (broker/definitions.go) and recovers it in
// recoverDefinitions.
package defs
