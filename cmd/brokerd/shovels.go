package main

// Shovels: the "shovel" runtime parameter component (broker/params.go)
// driven by the shovel engine (package shovel). brokerd registers the
// component with the broker, so a shovel parameter is validated by the
// engine's parser, started once it is durable (set, imported, and every
// stored one at start, by Broker.NotifyParameters), stopped when it is
// cleared or its vhost deleted; /api/shovels reads the engine. A shovel's
// "amqp://" side is this broker, reached through its own AMQP server code
// over in-memory pipes by an internal connection with every permission in
// the vhost (Broker.NewLocalConnector), as RabbitMQ's direct connection.
//
// On a cluster the engine runs with the broker, that is on the leader
// only (cluster.Config.Serve), and stops when it stops leading; the next
// leader's broker starts every shovel its store holds. The parameters are
// definitions, replicated with the rest.
//
// The engine is reached through shovelEngine, made by newShovelEngine
// (shovel_engine.go, the adapter of *shovel.Manager).

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/mgmt"
)

// shovelEngine is what brokerd drives of the shovel engine: a
// *shovel.Manager with shovel.ParseDefinition, through the adapter in
// shovel_engine.go. Safe for concurrent use.
type shovelEngine interface {
	// Validate checks a shovel parameter's value (shovel.ParseDefinition).
	Validate(vhost, name string, value json.RawMessage) error
	// Start starts (or replaces) a shovel from its parameter's value.
	Start(vhost, name string, value json.RawMessage)
	// Stop stops a shovel; unknown ones are ignored.
	Stop(vhost, name string)
	mgmt.Shovels
	// Close stops every shovel.
	Close()
}

// shovelOptions are the engine's options (shovel.Options).
type shovelOptions struct {
	Local   func(ctx context.Context, vhost string) (io.ReadWriteCloser, error)
	Deleted func(vhost, name string)
	Logger  *slog.Logger
	Node    string
}

// newShovelEngine makes the engine: newShovelManager, a variable so that a
// test can put a stand-in.
var newShovelEngine = newShovelManager

// shovels is one broker's shovel engine with its local connections.
type shovels struct {
	engine shovelEngine
	log    *slog.Logger
	// lc serves the shovels' connections to b; both are set by serve
	// before any shovel starts.
	lc *broker.LocalConnector
	b  *broker.Broker
}

// newShovels makes the engine for one broker. node is the node name the
// shovels' status shows.
func newShovels(log *slog.Logger, node string) *shovels {
	s := &shovels{log: log}
	s.engine = newShovelEngine(shovelOptions{
		Local: func(ctx context.Context, vhost string) (io.ReadWriteCloser, error) {
			return s.lc.Dial(ctx, vhost)
		},
		Deleted: s.deleted,
		Logger:  log,
		Node:    node,
	})
	return s
}

// register adds the shovel component to the broker's options.
func (s *shovels) register(o *broker.Options) {
	if s == nil {
		return
	}
	if o.Components == nil {
		o.Components = map[string]broker.Component{}
	}
	o.Components["shovel"] = broker.Component{Validate: s.engine.Validate, Notify: s.engine.Start, NotifyClear: s.engine.Stop}
}

// serve starts serving the shovels' connections to b with cfg (the AMQP
// client server's configuration for b), and every stored shovel.
func (s *shovels) serve(b *broker.Broker, cfg amqp.ServerConfig) {
	if s == nil {
		return
	}
	s.b = b
	s.lc = b.NewLocalConnector(cfg)
	b.NotifyParameters()
}

// deleted clears the parameter of a shovel done with src-delete-after
// (which stops it): from its own goroutine, since the engine calls it from
// the shovel's and Stop waits for that.
func (s *shovels) deleted(vhost, name string) {
	go func() {
		if err := s.b.ClearParameter(vhost, "shovel", name); err != nil && !errors.Is(err, broker.ErrNotFound) {
			s.log.Warn("shovels: clear the parameter of a shovel done with src-delete-after", "vhost", vhost, "name", name, "err", err)
		}
	}()
}

// api is what /api/shovels reads; nil without an engine.
func (s *shovels) api() mgmt.Shovels {
	if s == nil {
		return nil
	}
	return s.engine
}

// close stops every shovel, then their connections' server. Called
// before the broker closes.
func (s *shovels) close() {
	if s == nil {
		return
	}
	s.engine.Close()
	if s.lc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.lc.Close(ctx); err != nil {
			s.log.Warn("shovels: local connections did not close in time", "err", err)
		}
	}
}

// localNodeName is a single node's name as the management API shows it
// (mgmt's node): brokerd@<host name>.
func localNodeName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "brokerd@" + host
}
