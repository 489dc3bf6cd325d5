// Package broker implements the AMQP 0-9-1 model on top of a message store,
// and is brokerd's composition root (Open, Close). It holds the vhosts and
// their topology (broker/topology) and queues (broker/queue); connections,
// channels, consumers, deliveries, acknowledgements, publisher confirms,
// transactions and direct reply-to; users, permissions, policies and
// operator policies, runtime and global parameters (params.go), vhost and
// user limits and topic permissions (tenancy.go), and the definitions
// that persist them (their import included); redrive tasks, resource
// alarms, consumer timeouts, and the counters and views the management API
// reads (Direct runs management methods through a client's channel code).
// The amqp package calls it
// through amqp.Handler, amqp.Session and amqp.ChannelHandler; mgmt, metrics
// and cmd/brokerd through its exported methods.
//
// Its packages, one floor each, import only downwards:
//
//	broker           AMQP semantics, registries, composition root
//	broker/topology  exchanges, bindings, matching, the router
//	broker/queue     the queue engine (broker/queue/engine: its storage side)
//	broker/policy    policy keys, matching, the operator merge (pure)
//	broker/auth      password hashing, tags, permission patterns (pure)
//	broker/defs      durable definition records and their codecs (pure)
//	broker/stats     the event counters
//	broker/base      the errors the management API tells apart
//
// The queue engine runs on the goroutine of whoever causes the work (a
// publisher's reader enqueues, a consumer's reader settles, the timer
// scheduler expires); broker/queue/doc.go describes it and its locks.
//
// # Locks
//
// The table lists every mutex the package takes, and the other packages'
// mutexes it takes under its own, outermost first. Code that holds a lock
// takes only locks further down, never one further up, and a second lock
// of the same row only as the row's note says. Outer are the locks that
// may be held when it is taken, inner those taken while it is held ("-":
// none). The fields a lock guards are grouped under it in its struct. The
// queue engine's locks (Queue.mu and those below it) are in
// broker/queue/doc.go; they sit between VHost.policyMu and VHost.mu here.
//
//	lock                   guards                      outer                inner
//	Broker.paramMu         runtime and global          -                    authMu and all it takes;
//	                       parameter changes (and                           the components' notifications
//	                       imports, vhost deletions)                        (params.go)
//	                       with their notifications
//	Broker.authMu          user, vhost and permission  -                    VHost.policyMu, Broker.mu,
//	                       changes and definitions                          Broker.idMu, Queue.mu, VHost.mu,
//	                       imports, from the change                         conn.mu, the queue engine's,
//	                       in memory to the store's                         the connection's, the store's
//	                       completion [2]
//	VHost.policyMu         a vhost's policy changes,   authMu; another      VHost.mu, Queue.mu, Broker.mu,
//	                       from the change to its      vhost's policyMu     Broker.idMu, and what Queue.mu
//	                       application to the queues   [1]                  takes [3]
//	Broker.mu (RW)         vhosts, users, perms,       authMu, policyMu,    the store's
//	                       conns, closed, alarms and   the login limiter's
//	                       every VHost.meta
//	(Queue.mu and the      broker/queue/doc.go         authMu, policyMu     VHost.mu shared (the Router),
//	queue engine's)                                                         channel.mu, redriveTask.mu,
//	                                                                        confirmTracker.mu, directOut.mu
//	VHost.mu (RW)          its Topology (exchanges,    Queue.mu [4],        shared (under Queue.mu): the
//	                       queues, bindings), its      policyMu, authMu;    locks below it that Queue.mu
//	                       policies and opPolicies     another VHost.mu     takes; exclusive: Broker.idMu,
//	                                                   [1]                  another VHost.mu [1], the
//	                                                                        store's
//	Broker.idMu            the durable queue id mark   authMu, policyMu,    the store's
//	                       (written in id order)       VHost.mu
//	redriveTask.mu         a redrive task's state,     Queue.mu and         the store's
//	                       counters and source         VHost.mu (a move)
//	channel.mu             the channel's state         Queue.mu [5] (and    confirmTracker.mu, the
//	                       (unacked, consumers, tags,  VHost.mu)            connection's, directOut.mu
//	                       modes, put-off acks) and
//	                       its consumers' unacked
//	confirmTracker.mu      the confirm ring and its    channel.mu,          the connection's, directOut.mu
//	                       watermark                   Queue.mu, VHost.mu;
//	                                                   a store completion
//	conn.mu                channels, exclusive         authMu               -
//	Broker.chanMu          the channel opens of users  -                    Broker.mu (shared)
//	                       with a max-channels limit
//	                       (tenancy.go)
//	redrives.mu            the set of redrive tasks    -                    -
//	directOut.mu           a Direct's replies          channel.mu,          -
//	                                                   Queue.mu,
//	                                                   confirmTracker.mu
//	ttl.Scheduler's        its timer wheel             Queue.mu (and what   - (fire runs without it)
//	                                                   is outside it)
//	amqp.ServerConn's      its outbound queue (wmu)    authMu, Queue.mu,    - (its writer runs Later and
//	wmu and cmu,           and close state (cmu):      VHost.mu,            Drained without them)
//	"the connection's"     Send, Later, Writable,      channel.mu,
//	                       Close, Blocked              confirmTracker.mu
//	ratelog.Limiter's      a rate-limited warning      Queue.mu, VHost.mu   -
//	the store's            (store.Store): Apply, and   authMu, policyMu,    -
//	                       reads under Queue.mu        Broker.mu, Queue.mu,
//	                                                   VHost.mu, idMu,
//	                                                   redriveTask.mu
//
// [1] Locks of several vhosts are held together only by a definitions
// import (importdefs.go), which holds authMu and so runs alone: the
// policyMu of every existing vhost it changes, then their mu, each in name
// order; then, with those policyMu still held, each new vhost's policyMu
// in turn to apply its policies (importPlan.finish). Other code takes one
// vhost's locks.
//
// [2] authMu is outermost and connection code never takes it, so it is
// held across waits: for the store's completion (a change the store
// refuses is undone) and, in DeleteVHost, for the vhost's connections to
// end before its queues are deleted (deleteVHostContents). An import
// holds it while it takes queue locks too (applyPolicies, the new queues'
// leases), and DeleteUser while it closes connections.
//
// [3] policyMu is held while a policy change waits for the store and is
// then applied to each queue under the queue's lock (applyPolicies,
// Queue.ApplyPolicy), which may evict for a new limit and retries waiting
// dead letters. No code holding a queue or vhost lock takes it.
//
// [4] A queue's deletion takes its Queue.mu, then VHost.mu exclusively
// (Queue.Delete with the vhost's unlink), so the deletion follows every
// change to the queue's entries and every binding to it; so does a delayed
// exchange's, with its holding queue's lock (delayed.go), which is why an
// auto-delete delayed exchange left without bindings under VHost.mu is
// deleted after it is released (topology.Topology.Unheld); dead letters,
// and delayed messages at their release, are routed under the source's
// Queue.mu with VHost.mu shared. Hence no code
// takes a queue lock while it holds VHost.mu: declarations change the
// topology under VHost.mu and work on queues after releasing it.
// Broker.mu and VHost.mu are never held together.
//
// [5] channel.mu is taken under Queue.mu to hand the channel a delivery
// (channel.TryDeliver, RecordGet), so code holding channel.mu never takes
// a queue or vhost lock: an ack takes the deliveries out of the channel
// under its lock, releases it, then settles them queue by queue.
//
// No goroutine waits while it holds a Queue.mu, VHost.mu, Broker.mu or
// channel.mu: a store completion, a read of a queue's paged middle, a mark
// write, an alarm and Store.Reserve are waited for with none of them held.
//
// # Persistence
//
// Only persistent messages in durable queues, and durable definitions,
// reach the store (store.Store). A queue operation is one batch, applied
// under the locks of the queues it changes (broker/queue/doc.go);
// publisher confirms are sent from the batch's completion.
//
// Backpressure from the store is taken before any lock: a publish calls
// Store.Reserve (which waits while the store's log queue or un-checkpointed
// state is past its bound) where it waits for alarms, so Apply, called
// under queue locks, never blocks.
//
// Definitions follow the same rule: the store receives changes in the
// order memory made them. A declaration, deletion, binding, unbinding,
// policy, vhost, user or permission change calls Apply while it still
// holds the lock under which it changed memory (VHost.mu; Broker.mu for
// vhosts, users and permissions; for a queue's
// deletion its Queue.mu and then VHost.mu, so the deletion follows every
// change to the queue's entries and every binding to it), and waits for
// the completion only after releasing it. Apply never blocks on I/O, so
// calling it under these locks is cheap. A binding therefore never reaches
// the store after the deletion of its queue, and a queue's entries never
// before its definition.
//
// A reply that promises a durable change is sent only once the store has
// made it durable: declare-ok, bind-ok and unbind-ok, delete-ok and
// purge-ok (for queues and exchanges). If the store fails, the reply is a
// connection error 541 INTERNAL_ERROR instead.
//
// Recovery drops (with a warning, deleting the record) a definition that
// refers to something absent: a binding to or from an unknown queue or
// exchange, a queue, exchange or policy in an unknown vhost. A record that
// does not decode stops the broker from opening.
//
// A transaction is one store operation. tx.commit routes its publishes
// first, then hands them with the deliveries it acks, rejects or requeues
// to the queue engine (Env.Commit), which locks every queue they touch in
// id order, as a publish locks its targets, and builds the publishes, the
// settlements and the dead-lettered copies they cause into one batch
// applied under those locks; tx.commit-ok is sent from that
// batch's completion (a store failure closes the connection with 541
// instead). The reader carries on with the connection's other channels
// meanwhile; a later method on the committing channel waits for the
// completion, so no reply overtakes commit-ok.
//
// Publisher confirms are sent in tag order from a per-channel watermark
// (confirm.go): a completion only records ack or nack; consecutive acks go
// out as one basic.ack{multiple=true}, each nack on its own, and nothing
// past a publish that is still pending. With a store that completes in
// groups (the disk store's group commit, through AfterGroup), the flush
// is handed over once after the group, so each channel gets one ack frame
// per fsync. The connection's writer goroutine formats the frames, not the
// store's.
//
// # Where things go
//
//   - A new queue feature (a limit, a kind of expiry, a dead-letter rule)
//     goes in broker/queue (its doc says where); its argument in
//     broker/queue/args.go and its policy key in broker/policy's table.
//   - A new exchange type or routing rule goes in broker/topology.
//   - A new AMQP method goes in methods.go (the dispatch) with its
//     channel-side work in channel.go, declare.go or publish.go; it is
//     validated with RabbitMQ's codes and texts (errors.go).
//   - A new durable definition type gets its record in broker/defs (key
//     prefix, value struct, encode and decode mirrored, a golden and a
//     fuzzer), a Def builder beside the live type, its recovery in
//     recoverDefinitions and its import and export in importdefs.go.
//   - Pure rules (validation, matching, hashing) go in broker/policy or
//     broker/auth, with table tests; management-facing errors in
//     broker/base; a new counter in broker/stats.
package broker
