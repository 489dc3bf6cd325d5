// Package topology is a vhost's routing graph: its exchanges (with their
// types, alternate exchanges and publish counters), the bindings from an
// exchange to a queue or to another exchange, topic and headers matching,
// and the router that follows exchange-to-exchange bindings, alternate
// exchanges and CC/BCC keys to the set of queues a message reaches, each
// once.
//
// A delayed exchange (x-delayed-message) routes as the type its
// x-delayed-type names. A message due later (RouteHeldInto) stops at the
// first delayed exchange on each of its paths: that exchange's holding
// queue (Exchange.Hold, a queue of the engine's that is in no Topology's
// queue map) is among the queues returned, in place of its bindings and
// its alternate exchange, which the release routes through at the due
// time (Route, from the holding queue's lock, as a dead letter).
//
// A Topology takes no lock. Its owner's lock (broker.VHost.mu) guards all
// of it, and the binding lists of its exchanges: routing holds it shared —
// for a dead letter, from the source queue's lock through the queue
// engine's Router, until the batch that puts the copies is applied —
// and a declaration, binding or deletion holds it exclusively. Route
// allocates nothing for the common route (one exchange, its queues). The
// queues it routes to are the queue engine's (broker/queue); it imports
// that package, never the broker.
package topology
