// Command brokerd is the brokerd message broker daemon.
//
// With no arguments it serves AMQP 0-9-1 on 0.0.0.0:5672 and the management
// HTTP API (package mgmt) on 127.0.0.1:15672, with its data under ./data.
// See config/doc.go for the configuration file.
//
//	brokerd [-config FILE] [-listen ADDR] [-mgmt-listen ADDR] [-data DIR]
//	brokerd -version
//	brokerd verify [-config FILE] [-data DIR]
//	brokerd repair [-config FILE] [-data DIR] [-yes]
//
// verify and repair work on a stopped broker's data directory (see
// verify.go): verify reads every WAL record, segment block and index
// block and reports what is damaged, changing nothing; repair drops the
// damaged WAL records that keep brokerd from starting, and only those.
// brokerd exits with status 3 when it refuses to start on damage.
//
// Under systemd (Type=notify or notify-reload) it sends READY=1 once
// recovery is over and every listener is bound, STATUS= lines during
// recovery, WATCHDOG=1 while the broker passes a liveness check (when
// WatchdogSec is set), RELOADING=1 … READY=1 around a reload and
// STOPPING=1 at shutdown.
//
// SIGTERM or SIGINT drains (see shutdown): connections are closed with 320
// CONNECTION_FORCED after the confirms in flight, the store is closed and
// the process exits 0 within daemon.shutdown_timeout. SIGHUP reloads the
// settings that can change at run time (see live.reload) and logs the
// changed ones that need a restart.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/internal/datadir"
	"github.com/brokerd/brokerd/internal/fdbudget"
	"github.com/brokerd/brokerd/internal/loginlimit"
	"github.com/brokerd/brokerd/internal/sdnotify"
	"github.com/brokerd/brokerd/internal/version"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/wal"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	started := time.Now()
	if len(args) > 0 {
		switch args[0] {
		case "verify":
			return runVerify(args[1:], stdout, stderr)
		case "repair":
			return runRepair(args[1:], os.Stdin, stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("brokerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML configuration `file`")
	var o config.Overrides
	fs.Func("listen", "AMQP listen `address` (overrides amqp.listen)", func(s string) error { o.Listen = &s; return nil })
	fs.Func("mgmt-listen", "management HTTP listen `address`, or off (overrides mgmt.listen)", func(s string) error { o.MgmtListen = &s; return nil })
	fs.Func("data", "data `directory` (overrides storage.data_dir)", func(s string) error { o.DataDir = &s; return nil })
	showVersion := fs.Bool("version", false, "print the version and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) to `file` until the broker stops")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "brokerd %s\n", version.String())
		return 0
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "brokerd: cpu profile: %v\n", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "brokerd: cpu profile: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	cfg, err := loadConfig(*configPath, o)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd: %v\n", err)
		return 2
	}
	l, err := cfg.Log.Level.Slog()
	if err != nil {
		fmt.Fprintf(stderr, "brokerd: %v\n", err)
		return 2
	}
	level := new(slog.LevelVar)
	level.Set(l)
	logs := newLogSwitch(stderr, level, cfg.Log.Format)
	log := logs.logger()
	log.Info("starting brokerd", "version", version.String(), "config", *configPath, "data_dir", cfg.Storage.DataDir)
	lv := &live{path: *configPath, o: o, start: cfg, cfg: cfg, log: log, level: level, logs: logs,
		daemon: newDaemonInfo(started, cfg.Storage.DataDir, *configPath)}
	lv.shutdownTimeout.Store(int64(cfg.Daemon.ShutdownTimeout))
	if err := serve(cfg, lv); err != nil {
		log.Error("brokerd failed", "err", err)
		if hint, ok := damageHint(err); ok {
			log.Error(hint, "data_dir", cfg.Storage.DataDir)
			return exitDamaged
		}
		return exitFailed
	}
	return exitOK
}

func loadConfig(path string, o config.Overrides) (config.Config, error) {
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return cfg, err
		}
	}
	cfg.Apply(o)
	return cfg, cfg.Validate()
}

// closers are the resources serve opened, closed in reverse order at
// shutdown (or when the start fails).
type closers []func()

func (c *closers) add(fn func()) { *c = append(*c, fn) }

func (c *closers) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

func serve(cfg config.Config, lv *live) error {
	started := time.Now()
	log := lv.log
	// Caught from the start: a SIGTERM right after "accepting" or READY
	// must drain, not kill the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var res closers
	defer res.run() // nothing left after a graceful shutdown

	dir, err := datadir.Open(cfg.Storage.DataDir)
	if err != nil {
		return err
	}
	res.add(func() { dir.Close() })
	if cfg.Cluster.Enabled() {
		return serveCluster(cfg, lv, dir.Path, sigs, &res)
	}

	fds := descriptorBudget(log)
	status := &recoveryStatus{log: log}
	var storeAlarms alarmRelay
	st, err := openStore(cfg.Storage, cfg.Limits, dir.Path, log, status.wal, storeAlarms.set, fds.Store)
	if err != nil {
		return err
	}
	res.add(func() {
		if err := st.Close(); err != nil {
			log.Error("close store", "err", err)
		}
	})

	sh := newShovels(log, localNodeName())
	bopts := brokerOptions(cfg, st, log, status.queues)
	sh.register(&bopts)
	b, err := broker.Open(bopts)
	if err != nil {
		return fmt.Errorf("open broker: %w", err)
	}
	res.add(b.Close)
	lv.b = b
	storeAlarms.attach(b.SetAlarm)
	if ds, ok := st.(*diskstore.Store); ok {
		// The disk store watches the space it writes to itself, counting
		// what it is about to write (diskstore/space.go); the monitor
		// watches it for the memory store.
		lv.storeDisk = ds.SetDiskFreeLimit
	}

	memLimit := memoryLimit(cfg.Limits, log)
	lv.daemon.set(cfg, memLimit)
	if gl := alarm.SetGoMemoryLimit(memLimit); memLimit > 0 {
		log.Info("memory alarm", "watermark", memLimit, "go_memory_limit", gl)
	}
	mon := alarm.Start(alarm.Options{
		MemoryLimit:   memLimit,
		DiskPath:      dir.Path,
		DiskFreeLimit: lv.monitorDiskLimit(cfg.Limits),
		OnChange:      b.SetAlarm,
		Logger:        log,
	})
	res.add(mon.Close)
	lv.mon = mon

	srv := amqp.NewServer(amqpServerConfig(cfg, b, log, fds, memLimit))
	lv.srv, lv.fds = srv, fds
	// The shovels stop before the broker closes (closers run backwards).
	sh.serve(b, amqpServerConfig(cfg, b, log, fds, memLimit))
	res.add(sh.close)
	// Started before anything listens: a failed start closes every
	// listener opened so far.
	res.add(func() { srv.Shutdown(context.Background()) })
	errc := make(chan error, 8) // one per listener, never more
	var listeners []mgmt.Listener
	listen := func(name, addr string, tlsCfg *tls.Config, files config.TLS) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s on %s: %w", name, addr, err)
		}
		if tlsCfg != nil {
			l = tls.NewListener(l, tlsCfg)
		}
		log.Info("accepting AMQP connections", "listener", name, "addr", l.Addr().String())
		proto := "amqp"
		if tlsCfg != nil {
			proto = "amqp/ssl"
		}
		listeners = append(listeners, mgmt.Listener{Protocol: proto, Addr: l.Addr(), CertFile: files.CertFile, CAFile: files.CAFile})
		go func() { errc <- srv.Serve(l) }()
		return nil
	}
	if !config.Disabled(cfg.AMQP.Listen) {
		if err := listen("amqp", cfg.AMQP.Listen, nil, config.TLS{}); err != nil {
			return err
		}
	}
	if t := cfg.AMQP.TLS; !config.Disabled(t.Listen) {
		src, err := newTLSSource(t)
		if err != nil {
			return fmt.Errorf("amqp.tls: %w", err)
		}
		lv.amqpTLS = src
		if err := listen("amqps", t.Listen, src.config(), t); err != nil {
			return err
		}
	}
	// The API's and the metrics port's listeners are bound before the API
	// is made: its health checks (port-listener, ...) see them all.
	type apiListener struct {
		what string
		l    net.Listener
		tls  bool
	}
	var apiListeners []apiListener
	listenAPI := func(what, addr string, tlsCfg *tls.Config, files config.TLS) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen management %s API on %s: %w", what, addr, err)
		}
		res.add(func() { l.Close() }) // until the API serves it (then Shutdown closes it too)
		proto := "http"
		if tlsCfg != nil {
			proto = "https"
		}
		listeners = append(listeners, mgmt.Listener{Protocol: proto, Addr: l.Addr(), CertFile: files.CertFile, CAFile: files.CAFile})
		if tlsCfg != nil {
			l = tls.NewListener(l, tlsCfg)
		}
		apiListeners = append(apiListeners, apiListener{what, l, tlsCfg != nil})
		return nil
	}
	if !config.Disabled(cfg.Mgmt.Listen) {
		if err := listenAPI("HTTP", cfg.Mgmt.Listen, nil, config.TLS{}); err != nil {
			return err
		}
	}
	if t := cfg.Mgmt.TLS; !config.Disabled(t.Listen) {
		src, err := newTLSSource(t)
		if err != nil {
			return fmt.Errorf("mgmt.tls: %w", err)
		}
		lv.mgmtTLS = src
		if err := listenAPI("HTTPS", t.Listen, src.config(), t); err != nil {
			return err
		}
	}
	if !config.Disabled(cfg.Metrics.Listen) {
		ms, addr, err := serveMetrics(cfg, metrics.Options{Broker: b, PerQueueLimit: cfg.Metrics.PerQueueLimit, StoreStats: metrics.DiskStats(st)}, log, res.add)
		if err != nil {
			return err
		}
		listeners = append(listeners, mgmt.Listener{Protocol: "http/prometheus", Addr: addr})
		go func() { errc <- ms() }()
	}
	var api *mgmt.Server
	if len(apiListeners) > 0 {
		mo := mgmtOptions(cfg, lv, b, st, srv, mon, listeners, dir.Path, started)
		mo.Shovels = sh.api()
		api = mgmt.New(mo)
		res.add(func() { api.Shutdown(context.Background()) })
		for _, al := range apiListeners {
			log.Info("serving management "+al.what+" API", "addr", al.l.Addr().String(), "ui", uiURL(al.l.Addr(), al.tls))
			go func() { errc <- api.Serve(al.l) }()
		}
	}
	// Every listener is bound (the kernel queues connections from now on)
	// and recovery is over.
	if err := sdnotify.Notify("READY=1\nSTATUS=serving"); err != nil {
		log.Warn("sd_notify failed", "err", err)
	}
	var wd *watchdog
	if iv, err := sdnotify.WatchdogInterval(); err != nil {
		log.Warn("systemd watchdog off", "err", err)
	} else if iv > 0 {
		log.Info("systemd watchdog on", "interval", iv)
		wd = startWatchdog(iv/2, b.Sync, log)
		res.add(wd.stop)
	}

	for {
		select {
		case err := <-errc:
			if !errors.Is(err, amqp.ErrServerClosed) && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve: %w", err)
			}
		case s := <-sigs:
			if s == syscall.SIGHUP {
				lv.reload()
				continue
			}
			return shutdown(s, sigs, lv, srv, api, b, res.take(), log)
		}
	}
}

// brokerOptions are the broker's options over st. progress, if set,
// receives the queues' recovery progress.
func brokerOptions(cfg config.Config, st store.Store, log *slog.Logger, progress func(done, total int)) broker.Options {
	var users []broker.UserSpec
	for _, u := range cfg.Users {
		users = append(users, broker.UserSpec{Name: u.Name, Password: u.Password, PasswordHash: u.PasswordHash, Tags: u.Tags})
	}
	// A file's loopback_users = [] means none: nil would mean the default.
	loopback := append([]string{}, cfg.Auth.LoopbackUsers...)
	var vhosts []string
	for _, v := range cfg.Vhosts {
		vhosts = append(vhosts, v.Name)
	}
	return broker.Options{
		Store: st, Logger: log, VHosts: vhosts, Users: users, LoopbackUsers: loopback,
		MaxMessageSize:     int(cfg.AMQP.MaxMessageSize),
		PageWindow:         pageWindow(cfg.Storage),
		PageWindowBytes:    int64(cfg.Storage.PageWindowBytes),
		DeliveredMarkChunk: cfg.Storage.DeliveredMarkChunk,
		ConsumerTimeout:    consumerTimeout(cfg.AMQP.ConsumerTimeout),
		RecoveryProgress:   progress,
		LoginLimit:         loginlimit.New(loginLimit(cfg.Auth)),

		DenyTransientNonExclQueues: !cfg.DeprecatedFeatures.Permit.TransientNonexclQueues,
		ConsumerTimeoutCancel:      cfg.AMQP.ConsumerTimeoutCancel,
	}
}

// amqpServerConfig is the AMQP server's configuration, serving b.
func amqpServerConfig(cfg config.Config, b *broker.Broker, log *slog.Logger, fds fdbudget.Budget, memLimit uint64) amqp.ServerConfig {
	return amqp.ServerConfig{
		Handler:           b,
		Logger:            log,
		Heartbeat:         time.Duration(cfg.AMQP.Heartbeat),
		FrameMax:          uint32(cfg.AMQP.FrameMax),
		ChannelMax:        uint16(cfg.AMQP.ChannelMax),
		HandshakeTimeout:  time.Duration(cfg.AMQP.HandshakeTimeout),
		MaxMessageSize:    uint64(cfg.AMQP.MaxMessageSize),
		MaxConnections:    maxConnections(cfg.Limits, fds, log),
		LoginFailureDelay: loginFailureDelay(cfg.Auth),
		Version:           version.String(),

		MaxUnfinishedContentTotal: unfinishedContentLimit(cfg.AMQP, memLimit),
		Mechanisms:                cfg.Auth.Mechanisms,
		CertLogin:                 certLogin(cfg.Auth),
	}
}

// serveMetrics listens on [metrics] listen for a server of opts' metrics
// (mgmt.MetricsServer), adds its shutdown to closers (add), and returns
// its serve and the address it listens on.
func serveMetrics(cfg config.Config, opts metrics.Options, log *slog.Logger, add func(func())) (serve func() error, addr net.Addr, err error) {
	l, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen metrics on %s: %w", cfg.Metrics.Listen, err)
	}
	ms := mgmt.NewMetricsServer(metrics.Handler(opts), log, cfg.Mgmt.MaxConnections)
	add(func() { ms.Shutdown(context.Background()) })
	log.Info("serving Prometheus metrics", "addr", l.Addr().String(), "path", "/metrics")
	return func() error { return ms.Serve(l) }, l.Addr(), nil
}

// mgmtOptions are the management API's options, over b and st.
func mgmtOptions(cfg config.Config, lv *live, b *broker.Broker, st store.Store, srv *amqp.Server, mon *alarm.Monitor, listeners []mgmt.Listener, dataDir string, started time.Time) mgmt.Options {
	return mgmt.Options{Broker: b, Logger: lv.log, Version: version.String(), Listeners: listeners,
		MaxBody: int64(cfg.Mgmt.MaxBodySize), MaxDefinitionsBody: int64(cfg.Mgmt.MaxDefinitionsSize),
		BodyTimeout: time.Duration(cfg.Mgmt.BodyTimeout), MinBodyRate: int64(cfg.Mgmt.MinBodyRate),
		MaxConnections: cfg.Mgmt.MaxConnections, AllowedHosts: cfg.Mgmt.HostNames(),
		FrameMax: cfg.AMQP.FrameMax, LoginFailureDelay: loginFailureDelay(cfg.Auth), AuthMechanisms: cfg.Auth.Mechanisms,
		Metrics:   metrics.Handler(metrics.Options{Broker: b, PerQueueLimit: cfg.Metrics.PerQueueLimit, StoreStats: metrics.DiskStats(st)}),
		Daemon:    lv.daemon.info,
		RatesMode: cfg.Mgmt.RatesMode, SampleInterval: time.Duration(cfg.Mgmt.SampleInterval),
		Node: mgmt.NodeOptions{DataDir: dataDir, AMQP: srv, Started: started,
			MemoryLimit:   func() uint64 { mem, _ := mon.Limits(); return mem },
			DiskFreeLimit: diskFreeLimit(mon, st)}}
}

// take hands the resources over to the caller: the deferred run then
// closes nothing.
func (c *closers) take() closers {
	t := *c
	*c = nil
	return t
}

// shutdown drains on SIGTERM or SIGINT: it stops accepting, waits until
// the publishes received so far are durable and their confirms are
// queued to their connections (Broker.Sync), closes the connections with
// 320 CONNECTION_FORCED, waits for their close handshakes, then closes
// the broker and the store (which writes and fsyncs what its log holds).
//
// All of it within daemon.shutdown_timeout. Past it, or at a second
// SIGTERM or SIGINT, the process exits at once, with status 1, without
// closing the store: every confirm sent was sent after the fsync that
// made its message durable, and the next start replays the log (a torn
// last record is expected there and dropped), so no confirmed message is
// lost, and nothing half-closed is left to corrupt.
func shutdown(s os.Signal, sigs <-chan os.Signal, lv *live, srv *amqp.Server, api *mgmt.Server, b *broker.Broker, res closers, log *slog.Logger) error {
	timeout := lv.timeout()
	log.Info("shutting down", "signal", s.String(), "timeout", timeout)
	if err := sdnotify.Notify("STOPPING=1\nSTATUS=shutting down"); err != nil {
		log.Warn("sd_notify failed", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.StopAccepting()
		if api != nil {
			if err := api.Shutdown(ctx); err != nil {
				log.Warn("management HTTP requests did not finish in time", "err", err)
			}
		}
		synced := make(chan error, 1)
		go func() { synced <- b.Sync() }()
		select {
		case err := <-synced:
			if err != nil {
				log.Warn("publisher confirms in flight not all delivered", "err", err)
			}
		case <-ctx.Done():
		}
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn("connections did not close in time", "err", err)
		}
		res.run()
	}()
	for {
		select {
		case <-done:
			log.Info("stopped")
			return nil
		case <-ctx.Done():
			log.Error("shutdown timed out; exiting without closing the store (recovery replays its log at the next start)", "timeout", timeout)
			os.Exit(1)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				continue
			}
			log.Error("second signal: exiting without closing the store (recovery replays its log at the next start)", "signal", s.String())
			os.Exit(1)
		}
	}
}

// consumerTimeout maps amqp.consumer_timeout to broker.Options, where 0
// means the default and a negative value none.
func consumerTimeout(d config.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return time.Duration(d)
}

// loginFailureDelay maps auth.login_failure_delay to the servers' options,
// where 0 means the default and a negative value none.
func loginFailureDelay(a config.Auth) time.Duration {
	if a.LoginFailureDelay == 0 {
		return -1
	}
	return time.Duration(a.LoginFailureDelay)
}

// loginLimit maps auth.failed_login_burst (0: no limit) and
// auth.failed_login_interval to loginlimit's options (a negative burst:
// no limit).
func loginLimit(a config.Auth) loginlimit.Options {
	burst := a.FailedLoginBurst
	if burst == 0 {
		burst = -1
	}
	return loginlimit.Options{Burst: burst, Interval: time.Duration(a.FailedLoginInterval)}
}

// memoryLimit is the memory alarm's limit: the absolute setting, else
// the fraction of physical memory (0 when neither applies).
func memoryLimit(l config.Limits, log *slog.Logger) uint64 {
	if l.MemoryHighWatermarkBytes > 0 {
		return uint64(l.MemoryHighWatermarkBytes)
	}
	if l.MemoryHighWatermark <= 0 {
		return 0
	}
	total, err := alarm.TotalMemory()
	if err != nil {
		log.Warn("cannot read physical memory; memory alarm off", "err", err)
		return 0
	}
	return uint64(float64(total) * l.MemoryHighWatermark)
}

// unfinishedContentLimit is the server's budget of message bodies being
// received: amqp.unfinished_content_limit, at most a quarter of the memory
// watermark (mem, 0 when there is none). A memory alarm stops publishers
// at their next content frame, with what they have sent of their bodies
// held: were those bodies most of the watermark, their own memory would
// keep the alarm raised and stall them all for good.
func unfinishedContentLimit(a config.AMQP, mem uint64) uint64 {
	n := uint64(a.UnfinishedContentLimit)
	if mem > 0 {
		n = min(n, max(mem/4, 1))
	}
	return n
}

// openStore opens the configured message store in the data directory.
func openStore(c config.Storage, limits config.Limits, dir string, log *slog.Logger, progress func(done, total uint64), alarm func(string, bool), maxOpenFiles int) (store.Store, error) {
	if c.Engine == config.EngineMemory {
		log.Warn("message store is in memory: messages and definitions do not survive a restart", "data_dir", dir)
		return memstore.New(), nil
	}
	opts, err := diskOptions(c, limits, log, progress, alarm, maxOpenFiles)
	if err != nil {
		return nil, err
	}
	st, err := diskstore.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	return st, nil
}

// diskOptions are the disk store's options from [storage] and [limits].
func diskOptions(c config.Storage, limits config.Limits, log *slog.Logger, progress func(done, total uint64), alarm func(string, bool), maxOpenFiles int) (diskstore.Options, error) {
	sync, err := wal.ParseSyncPolicy(string(c.Sync))
	if err != nil {
		return diskstore.Options{}, err
	}
	return diskstore.Options{
		Sync:               sync,
		SyncInterval:       time.Duration(c.SyncInterval),
		CheckpointBytes:    int64(c.CheckpointBytes),
		CheckpointInterval: time.Duration(c.CheckpointInterval),
		CacheBytes:         int64(c.SegmentCache),
		IndexCacheBytes:    int64(c.IndexCache),
		Logger:             log,
		RecoveryProgress:   progress,
		OnAlarm:            alarm,
		DiskFreeLimit:      uint64(limits.DiskFreeLimit),
		MaxOpenFiles:       maxOpenFiles,
		FreeDescriptors:    fdbudget.Free,
	}, nil
}

// descriptorBudget divides the process's file descriptors between the
// store and the listeners (internal/fdbudget).
func descriptorBudget(log *slog.Logger) fdbudget.Budget {
	limit, err := fdbudget.Limit()
	if err != nil {
		log.Warn("cannot read the file descriptor limit; assuming 1024", "err", err)
		limit = 1024
	}
	b := fdbudget.Split(limit)
	log.Info("file descriptors", "limit", b.Limit, "store", b.Store, "http", b.HTTP, "amqp", b.AMQP)
	return b
}

// maxConnections is limits.max_connections in force: as set, or the AMQP
// share of the descriptor budget when 0.
func maxConnections(c config.Limits, fds fdbudget.Budget, log *slog.Logger) int {
	if c.MaxConnections == 0 {
		return fds.AMQP
	}
	if c.MaxConnections > fds.AMQP {
		log.Warn("limits.max_connections leaves the store less than its reserve of file descriptors: with that many connections open, checkpoints wait for descriptors and publishers are blocked",
			"max_connections", c.MaxConnections, "fd_limit", fds.Limit, "store_reserve", fds.Store, "suggested_max", fds.AMQP)
	}
	return c.MaxConnections
}

// pageWindow maps storage.page_window to broker.Options.PageWindow, where
// 0 means the default and a negative value no paging. The memory engine
// does not page: its store holds every message in memory anyway.
func pageWindow(c config.Storage) int {
	if c.PageWindow == 0 || c.Engine == config.EngineMemory {
		return -1
	}
	return c.PageWindow
}
