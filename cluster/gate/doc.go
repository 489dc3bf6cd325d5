// Package gate shares one client listener (AMQP's, or the management
// HTTP API's) between serving here and forwarding elsewhere: in cluster
// mode (issue 25, phase 1) only the Raft leader runs the broker, and
// every other node hands its clients' connections, whole, to the leader.
//
// A Gate owns the real net.Listener and runs its accept loop. While a
// virtual listener is open (Open: this node leads and its server runs
// Serve on it), every connection accepted goes to that listener's Accept;
// while none is, each is handed to the forward function, on its own
// goroutine (cluster mode's dials the leader with transport.DialConn and
// Splices the two). Connections another node proxied here (Inject) go to
// the open virtual listener too, and are closed if none is open: they
// are never forwarded again, so a connection cannot loop between nodes
// that each believe the other leads; its client reconnects.
//
// # Hand-over
//
// A connection is offered to the open listener synchronously, as a real
// listener's backlog holds it: the gate's accept loop (or Inject's
// goroutine) waits until Accept takes it. So a connection is never
// queued inside a virtual listener: when the listener is closed (what
// amqp.Server.Shutdown and http.Server.Shutdown do), Accept returns
// net.ErrClosed and a connection being offered is dispatched again to
// whatever is current — forwarded if it came from the real listener
// (its client has sent nothing that was read), closed if it was
// injected. Nothing is lost, and nothing is both served and forwarded.
// A connection Accept returned belongs to the listener's caller even if
// the listener was closed just after, as with a real listener.
//
// Only one virtual listener is open at a time: Open while one is open
// returns ErrOpen (two servers on one port is the caller's bug, but not
// one worth crashing a node for), and after Close, net.ErrClosed.
//
// TLS: give the gate the plain TCP listener and wrap the virtual one
// (tls.NewListener) for serving, so that a forwarded amqps client's TLS
// ends at the node that serves it, which verifies its certificate; the
// forwarding node carries opaque bytes.
//
// # Concurrency and lifetime
//
// Every method is safe for concurrent use. The gate runs one accept loop
// and one goroutine per forwarded connection (the forward function) and
// per injected connection being offered. Close closes the real listener,
// the open virtual one and every forwarded connection whose forward has
// not returned, and waits for all of them: forward must return once its
// connection is closed.
package gate
