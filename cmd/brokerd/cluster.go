package main

// Cluster mode ([cluster] set): this process is a node of a brokerd
// cluster (package cluster). The node's listeners are gates: while it
// leads the group and serves, they hand connections to its broker's
// servers; otherwise they forward each one, whole, to the leader over the
// inter-node port (designs/replication.md 4.7, phase 1).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/cluster"
	"github.com/brokerd/brokerd/cluster/gate"
	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/internal/fdbudget"
	"github.com/brokerd/brokerd/internal/sdnotify"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store/diskstore"
)

// The services a node's gates carry (transport client streams name them).
const (
	svcAMQP  = "amqp"
	svcAMQPS = "amqps"
	svcHTTP  = "http"
	svcHTTPS = "https"
)

// clusterServer is a node's serving side: its gates, and the broker with
// its servers while the node leads.
type clusterServer struct {
	cfg     config.Config
	lv      *live
	log     *slog.Logger
	dataDir string
	started time.Time
	fds     fdbudget.Budget
	mon     *alarm.Monitor
	// node is set once cluster.Open returns; the gates forward (and the
	// node may serve) before that, from their own goroutines.
	node atomic.Pointer[cluster.Node]

	gates     map[string]*gate.Gate // by service
	tls       map[string]*tlsSource // amqps, https
	listeners []mgmt.Listener

	alarms clusterAlarms
	// broker is the broker while the node serves (the metrics port's).
	broker atomic.Pointer[broker.Broker]
}

// serveCluster is serve for a cluster node: it runs until a signal stops
// it. dir is the locked data directory.
func serveCluster(cfg config.Config, lv *live, dir string, sigs <-chan os.Signal, res *closers) error {
	log := lv.log
	if cfg.Storage.Engine == config.EngineMemory {
		return errors.New("cluster: storage.engine = \"memory\" cannot be replicated; use the disk engine")
	}
	peers, err := cfg.Cluster.PeerList()
	if err != nil {
		return err
	}
	cs := &clusterServer{cfg: cfg, lv: lv, log: log, dataDir: dir, started: time.Now(),
		gates: map[string]*gate.Gate{}, tls: map[string]*tlsSource{}}
	cs.fds = descriptorBudget(log)
	memLimit := memoryLimit(cfg.Limits, log)
	lv.daemon.set(cfg, memLimit)
	alarm.SetGoMemoryLimit(memLimit)
	cs.mon = alarm.Start(alarm.Options{MemoryLimit: memLimit, DiskPath: dir, DiskFreeLimit: lv.monitorDiskLimit(cfg.Limits),
		OnChange: cs.alarms.set, Logger: log})
	res.add(cs.mon.Close)
	lv.mon, lv.fds = cs.mon, cs.fds

	// The listeners first: a port taken fails the start before the node
	// joins anything.
	listen := func(service, addr string, t *config.TLS) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s on %s: %w", service, addr, err)
		}
		if t != nil {
			src, err := newTLSSource(*t)
			if err != nil {
				l.Close()
				return fmt.Errorf("%s: %w", service, err)
			}
			cs.tls[service] = src
		}
		g := gate.New(l, func(c net.Conn) { cs.forward(service, c) })
		cs.gates[service] = g
		res.add(func() { g.Close() })
		proto := map[string]string{svcAMQP: "amqp", svcAMQPS: "amqp/ssl", svcHTTP: "http", svcHTTPS: "https"}[service]
		ml := mgmt.Listener{Protocol: proto, Addr: l.Addr()}
		if t != nil {
			ml.CertFile, ml.CAFile = t.CertFile, t.CAFile
		}
		cs.listeners = append(cs.listeners, ml)
		log.Info("listening", "service", service, "addr", l.Addr().String())
		return nil
	}
	if !config.Disabled(cfg.AMQP.Listen) {
		if err := listen(svcAMQP, cfg.AMQP.Listen, nil); err != nil {
			return err
		}
	}
	if t := cfg.AMQP.TLS; !config.Disabled(t.Listen) {
		if err := listen(svcAMQPS, t.Listen, &t); err != nil {
			return err
		}
	}
	if !config.Disabled(cfg.Mgmt.Listen) {
		if err := listen(svcHTTP, cfg.Mgmt.Listen, nil); err != nil {
			return err
		}
	}
	if t := cfg.Mgmt.TLS; !config.Disabled(t.Listen) {
		if err := listen(svcHTTPS, t.Listen, &t); err != nil {
			return err
		}
	}

	lv.amqpTLS, lv.mgmtTLS = cs.tls[svcAMQPS], cs.tls[svcHTTPS]
	// The metrics port is this node's own, never forwarded: its store's
	// and Raft's metrics always, the broker's while it leads.
	var serveMetricsPort func() error
	if !config.Disabled(cfg.Metrics.Listen) {
		var addr net.Addr
		serveMetricsPort, addr, err = serveMetrics(cfg, metrics.Options{Current: cs.broker.Load, PerQueueLimit: cfg.Metrics.PerQueueLimit,
			StoreStats: cs.storeStats, Cluster: cs.clusterStatus}, log, res.add)
		if err != nil {
			return err
		}
		cs.listeners = append(cs.listeners, mgmt.Listener{Protocol: "http/prometheus", Addr: addr})
	}

	var interTLS *tls.Config
	if t := cfg.Cluster.TLS; t.CertFile != "" {
		if interTLS, err = loadTLS(config.TLS{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, VerifyPeer: true, FailIfNoPeerCert: true}); err != nil {
			return fmt.Errorf("cluster.tls: %w", err)
		}
		interTLS.RootCAs = interTLS.ClientCAs
	}
	opts, err := diskOptions(cfg.Storage, cfg.Limits, log, nil, cs.alarms.set, cs.fds.Store)
	if err != nil {
		return err
	}
	var cpeers []cluster.Peer
	for _, p := range peers {
		cpeers = append(cpeers, cluster.Peer{Name: p.Name, Addr: p.Addr})
	}
	node, err := cluster.Open(cluster.Config{
		Cluster: cfg.Cluster.Name, Name: cfg.Cluster.NodeName, Peers: cpeers, Listen: cfg.Cluster.Listen, TLS: interTLS,
		Dir: dir, Store: opts, Logger: log,
		Tick: time.Duration(cfg.Cluster.Tick), ElectionTicks: cfg.Cluster.ElectionTicks, HeartbeatTicks: cfg.Cluster.HeartbeatTicks,
		LogKeepBytes: int64(cfg.Cluster.LogKeepBytes),
		Serve:        cs.serve,
		OnConn: func(service string, c net.Conn) {
			if g := cs.gates[service]; g != nil {
				g.Inject(c)
				return
			}
			c.Close()
		},
	})
	if err != nil {
		return err
	}
	cs.node.Store(node)
	if serveMetricsPort != nil {
		go func() {
			if err := serveMetricsPort(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics port failed", "err", err)
			}
		}()
	}
	res.add(func() {
		if err := node.Close(); err != nil {
			log.Warn("cluster: close the node", "err", err)
		}
	})
	log.Info("cluster: node started", "node", cfg.Cluster.NodeName, "listen", cfg.Cluster.Listen, "peers", len(peers))
	// The watchdog runs from the start, leader or not: a node waiting for
	// its peers is alive. Its check is the Raft loop's.
	if iv, err := sdnotify.WatchdogInterval(); err != nil {
		log.Warn("systemd watchdog off", "err", err)
	} else if iv > 0 {
		log.Info("systemd watchdog on", "interval", iv)
		wd := startWatchdog(iv/2, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), iv/2)
			defer cancel()
			return node.Check(ctx)
		}, log)
		res.add(wd.stop)
	}

	joined := node.Joined()
	for {
		select {
		case <-joined:
			joined = nil
			log.Info("cluster: joined", "leader", node.LeaderName())
			if err := sdnotify.Notify("READY=1\nSTATUS=serving as a cluster node"); err != nil {
				log.Warn("sd_notify failed", "err", err)
			}
		case s := <-sigs:
			if s == syscall.SIGHUP {
				lv.reload()
				continue
			}
			log.Info("shutting down", "signal", s.String())
			if err := sdnotify.Notify("STOPPING=1\nSTATUS=shutting down"); err != nil {
				log.Warn("sd_notify failed", "err", err)
			}
			res.run()
			log.Info("stopped")
			return nil
		}
	}
}

// forward hands c, accepted while this node does not serve, to the
// leader's node over the inter-node port. During an election it waits for
// a leader (up to forwardWait): the client sees a slow connect, not a
// reset; when the leader is this node, c goes to its own servers once
// they serve.
func (cs *clusterServer) forward(service string, c net.Conn) {
	node := cs.node.Load()
	if node == nil {
		// Accepted while the node still opens its store: the client
		// connects again.
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardWait)
	defer cancel()
	for {
		changed := node.Changed()
		leader, err := node.AwaitLeader(ctx)
		if err != nil {
			cs.log.Warn("cluster: no leader to forward a client connection to", "service", service, "client", c.RemoteAddr().String(), "waited", forwardWait)
			c.Close()
			return
		}
		if leader == cs.cfg.Cluster.NodeName {
			// This node serves, or is about to open its servers.
			g := cs.gates[service]
			for !g.Serving() && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // the servers open within milliseconds
			}
			g.Inject(c)
			return
		}
		remote, err := node.Transport().DialConn(ctx, leader, service, c.RemoteAddr())
		if err == nil {
			if err := gate.Splice(c, remote); err != nil {
				cs.log.Debug("cluster: a forwarded connection failed", "service", service, "err", err)
			}
			return
		}
		// The leader this node knew is gone (killed, say): wait for
		// the next one.
		cs.log.Info("cluster: could not reach the leader to forward a client connection; waiting for the next", "service", service, "leader", leader, "err", err)
		select {
		case <-changed:
		case <-ctx.Done():
			c.Close()
			return
		}
	}
}

// forwardWait bounds how long a connection waits for a leader to serve
// it: an election takes a second or two.
const forwardWait = 10 * time.Second

// serve is the node's Config.Serve: the broker over st, with its AMQP
// server and management API on the gates, until ctx ends.
func (cs *clusterServer) serve(ctx context.Context, st *diskstore.Store, lease *cluster.Lease) {
	cfg, log := cs.cfg, cs.log
	opts := brokerOptions(cfg, st, log, nil)
	opts.Lease = lease
	// The shovels run with the broker: on the leader only (shovels.go).
	sh := newShovels(log, cfg.Cluster.NodeName)
	sh.register(&opts)
	b, err := broker.Open(opts)
	if err != nil {
		log.Error("cluster: open the broker", "err", err)
		<-ctx.Done()
		return
	}
	cs.alarms.attach(b.SetAlarm)
	memLimit, _ := cs.mon.Limits()
	srv := amqp.NewServer(amqpServerConfig(cfg, b, log, cs.fds, memLimit))
	sh.serve(b, amqpServerConfig(cfg, b, log, cs.fds, memLimit))
	mo := cs.mgmtOptions(b, st, srv)
	mo.Shovels = sh.api()
	api := mgmt.New(mo)
	detach := cs.lv.attach(b, srv)
	defer detach()
	cs.broker.Store(b)
	var wg sync.WaitGroup
	for service, g := range cs.gates {
		l, err := g.Open()
		if err != nil {
			log.Error("cluster: serve a listener", "service", service, "err", err)
			continue
		}
		if src := cs.tls[service]; src != nil {
			l = tls.NewListener(l, src.config())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if service == svcAMQP || service == svcAMQPS {
				srv.Serve(l)
			} else {
				api.Serve(l)
			}
		}()
	}
	log.Info("cluster: serving clients")
	<-ctx.Done()
	cs.broker.CompareAndSwap(b, nil)
	log.Info("cluster: stopped leading; closing client connections")
	sctx, cancel := context.WithTimeout(context.Background(), cs.lv.timeout())
	defer cancel()
	if err := api.Shutdown(sctx); err != nil {
		log.Warn("management HTTP requests did not finish in time", "err", err)
	}
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("connections did not close in time", "err", err)
	}
	wg.Wait()
	sh.close()
	cs.alarms.attach(nil)
	b.Close()
}

// clusterAlarms keeps the alarms raised (by the store, the monitor) and
// passes them to the broker serving now, if any.
type clusterAlarms struct {
	mu     sync.Mutex
	to     func(resource string, raised bool)
	raised map[string]bool
}

func (a *clusterAlarms) set(resource string, raised bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.raised == nil {
		a.raised = map[string]bool{}
	}
	a.raised[resource] = raised
	if a.to != nil {
		a.to(resource, raised)
	}
}

// attach makes to the broker the alarms go to (nil: none), telling it
// those raised now.
func (a *clusterAlarms) attach(to func(resource string, raised bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.to = to
	if to != nil {
		for r, raised := range a.raised {
			if raised {
				to(r, true)
			}
		}
	}
}
