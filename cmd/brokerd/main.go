// Command brokerd is the brokerd message broker daemon.
//
// With no arguments it serves AMQP 0-9-1 on 0.0.0.0:5672 and the management
// HTTP API (package mgmt) on 127.0.0.1:15672, with its data under ./data.
// See config/doc.go for the configuration file.
//
//	brokerd [-config FILE] [-listen ADDR] [-mgmt-listen ADDR] [-data DIR]
//
// SIGTERM or SIGINT drains: connections are closed with 320
// CONNECTION_FORCED and the process exits 0. SIGHUP reloads the settings
// that can change at run time (the log level).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/internal/datadir"
	"github.com/brokerd/brokerd/internal/sdnotify"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/wal"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("brokerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML configuration `file`")
	var o config.Overrides
	fs.Func("listen", "AMQP listen `address` (overrides amqp.listen)", func(s string) error { o.Listen = &s; return nil })
	fs.Func("mgmt-listen", "management HTTP listen `address`, or off (overrides mgmt.listen)", func(s string) error { o.MgmtListen = &s; return nil })
	fs.Func("data", "data `directory` (overrides storage.data_dir)", func(s string) error { o.DataDir = &s; return nil })
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadConfig(*configPath, o)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd: %v\n", err)
		return 2
	}
	level := new(slog.LevelVar)
	log, err := newLogger(cfg, level, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd: %v\n", err)
		return 2
	}
	if err := serve(cfg, *configPath, o, level, log); err != nil {
		log.Error("brokerd failed", "err", err)
		return 1
	}
	return 0
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

func newLogger(cfg config.Config, level *slog.LevelVar, w io.Writer) (*slog.Logger, error) {
	l, err := cfg.Log.Level.Slog()
	if err != nil {
		return nil, err
	}
	level.Set(l)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == config.FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "0.1.0-dev"
}

func serve(cfg config.Config, configPath string, o config.Overrides, level *slog.LevelVar, log *slog.Logger) error {
	// Caught from the start: a SIGTERM right after "accepting" or READY
	// must drain, not kill the process.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	dir, err := datadir.Open(cfg.Storage.DataDir)
	if err != nil {
		return err
	}
	defer dir.Close()

	st, err := openStore(cfg.Storage, dir.Path, log)
	if err != nil {
		return err
	}
	defer st.Close()

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
	b, err := broker.Open(broker.Options{
		Store: st, Logger: log, VHosts: vhosts, Users: users, LoopbackUsers: loopback,
		MaxMessageSize:  int(cfg.AMQP.MaxMessageSize),
		PageWindow:      pageWindow(cfg.Storage),
		PageWindowBytes: int64(cfg.Storage.PageWindowBytes),
		ConsumerTimeout: consumerTimeout(cfg.AMQP.ConsumerTimeout),
	})
	if err != nil {
		return fmt.Errorf("open broker: %w", err)
	}
	defer b.Close()

	memLimit := memoryLimit(cfg.Limits, log)
	if gl := alarm.SetGoMemoryLimit(memLimit); memLimit > 0 {
		log.Info("memory alarm", "watermark", memLimit, "go_memory_limit", gl)
	}
	mon := alarm.Start(alarm.Options{
		MemoryLimit:   memLimit,
		DiskPath:      dir.Path,
		DiskFreeLimit: uint64(cfg.Limits.DiskFreeLimit),
		OnChange:      b.SetAlarm,
		Logger:        log,
	})
	defer mon.Close()

	srv := amqp.NewServer(amqp.ServerConfig{
		Handler:          b,
		Logger:           log,
		Heartbeat:        time.Duration(cfg.AMQP.Heartbeat),
		FrameMax:         uint32(cfg.AMQP.FrameMax),
		ChannelMax:       uint16(cfg.AMQP.ChannelMax),
		HandshakeTimeout: time.Duration(cfg.AMQP.HandshakeTimeout),
		MaxMessageSize:   uint64(cfg.AMQP.MaxMessageSize),
		MaxConnections:   cfg.Limits.MaxConnections,
		Version:          version(),
	})
	errc := make(chan error, 3)
	var listeners []mgmt.Listener
	listen := func(name, addr string, tlsCfg *tls.Config) error {
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
		listeners = append(listeners, mgmt.Listener{Protocol: proto, Addr: l.Addr()})
		go func() { errc <- srv.Serve(l) }()
		return nil
	}
	if !config.Disabled(cfg.AMQP.Listen) {
		if err := listen("amqp", cfg.AMQP.Listen, nil); err != nil {
			return err
		}
	}
	if t := cfg.AMQP.TLS; !config.Disabled(t.Listen) {
		tlsCfg, err := loadTLS(t)
		if err != nil {
			return err
		}
		if err := listen("amqps", t.Listen, tlsCfg); err != nil {
			return err
		}
	}
	var api *mgmt.Server
	if !config.Disabled(cfg.Mgmt.Listen) {
		l, err := net.Listen("tcp", cfg.Mgmt.Listen)
		if err != nil {
			return fmt.Errorf("listen management HTTP API on %s: %w", cfg.Mgmt.Listen, err)
		}
		api = mgmt.New(mgmt.Options{Broker: b, Logger: log, Version: version(), Listeners: listeners,
			Metrics: metrics.Handler(metrics.Options{Broker: b, PerQueueLimit: cfg.Metrics.PerQueueLimit, StoreStats: metrics.DiskStats(st)})})
		log.Info("serving management HTTP API", "addr", l.Addr().String())
		go func() { errc <- api.Serve(l) }()
	}
	if err := sdnotify.Notify("READY=1"); err != nil {
		log.Warn("sd_notify failed", "err", err)
	}

	for {
		select {
		case err := <-errc:
			if !errors.Is(err, amqp.ErrServerClosed) && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve: %w", err)
			}
		case s := <-sigs:
			if s == syscall.SIGHUP {
				reload(configPath, o, level, log)
				continue
			}
			log.Info("shutting down", "signal", s.String())
			sdnotify.Notify("STOPPING=1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if api != nil {
				if err := api.Shutdown(ctx); err != nil {
					log.Warn("management HTTP requests did not finish in time", "err", err)
				}
			}
			err := srv.Shutdown(ctx)
			cancel()
			if err != nil {
				log.Warn("connections did not close in time", "err", err)
			}
			log.Info("stopped")
			return nil
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

// reload re-reads the configuration on SIGHUP and applies what can change
// while running: the log level. Other changes need a restart (logged).
func reload(path string, o config.Overrides, level *slog.LevelVar, log *slog.Logger) {
	cfg, err := loadConfig(path, o)
	if err != nil {
		log.Error("reload refused: configuration invalid", "err", err)
		return
	}
	l, err := cfg.Log.Level.Slog()
	if err != nil {
		log.Error("reload refused", "err", err)
		return
	}
	level.Set(l)
	log.Info("configuration reloaded", "log_level", l.String())
}

func loadTLS(t config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", t.CAFile)
		}
		c.ClientCAs = pool
	}
	if t.VerifyPeer {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// openStore opens the configured message store in the data directory.
func openStore(c config.Storage, dir string, log *slog.Logger) (store.Store, error) {
	if c.Engine == config.EngineMemory {
		log.Warn("message store is in memory: messages and definitions do not survive a restart", "data_dir", dir)
		return memstore.New(), nil
	}
	sync, err := wal.ParseSyncPolicy(string(c.Sync))
	if err != nil {
		return nil, err
	}
	st, err := diskstore.Open(dir, diskstore.Options{
		Sync:               sync,
		SyncInterval:       time.Duration(c.SyncInterval),
		CheckpointBytes:    int64(c.CheckpointBytes),
		CheckpointInterval: time.Duration(c.CheckpointInterval),
		CacheBytes:         int64(c.SegmentCache),
		IndexCacheBytes:    int64(c.IndexCache),
		Logger:             log,
	})
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	return st, nil
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
