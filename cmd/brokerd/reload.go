package main

import (
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/internal/fdbudget"
	"github.com/brokerd/brokerd/internal/sdnotify"
)

// live holds what a SIGHUP reload can change in a running broker. Its
// methods run on serve's goroutine only, except shutdownTimeout, read
// by the shutdown, and attach (a cluster node's serving side), which mu
// orders with reload.
type live struct {
	mu   sync.Mutex
	path string
	o    config.Overrides
	// start is the configuration brokerd started with, which settings
	// that need a restart keep; cfg the one last applied.
	start, cfg config.Config
	log        *slog.Logger

	level *slog.LevelVar
	logs  *logSwitch
	// srv and b are the AMQP server and the broker: for good on a single
	// node, while it leads on a cluster node (attach); nil otherwise.
	srv *amqp.Server
	fds fdbudget.Budget // the file descriptors' division, fixed at start
	b   *broker.Broker
	// storeDisk sets the disk store's disk_free_limit; nil on the memory
	// store, whose disk alarm the monitor raises.
	storeDisk func(uint64)
	mon       *alarm.Monitor
	amqpTLS   *tlsSource // nil: no amqps listener
	mgmtTLS   *tlsSource // nil: no HTTPS listener

	shutdownTimeout atomic.Int64 // daemon.shutdown_timeout in force
	// daemon tells the management API what runs (set at every reload).
	daemon *daemonInfo
}

// reloadable are the settings a reload applies; any other change is
// logged as needing a restart.
var reloadable = map[string]bool{
	"log.level": true, "log.format": true,
	"limits.memory_high_watermark": true, "limits.memory_high_watermark_bytes": true,
	"limits.disk_free_limit": true, "limits.max_connections": true,
	"amqp.consumer_timeout":   true,
	"daemon.shutdown_timeout": true,
	"amqp.tls.cert_file":      true, "amqp.tls.key_file": true, "amqp.tls.ca_file": true, "amqp.tls.verify_peer": true,
	"mgmt.tls.cert_file": true, "mgmt.tls.key_file": true, "mgmt.tls.ca_file": true, "mgmt.tls.verify_peer": true,
	"amqp.unfinished_content_limit": true,
	"amqp.tls.fail_if_no_peer_cert": true, "mgmt.tls.fail_if_no_peer_cert": true,
}

// bootstrapOnly are settings used on a fresh data directory only: a
// restart does not apply them either.
var bootstrapOnly = map[string]bool{"users": true, "vhosts": true}

// reload re-reads the configuration file on SIGHUP, applies what can
// change at run time and logs each changed setting: applied, or needing a
// restart. An invalid file changes nothing. The TLS certificate, key and
// CA files are read again even if their names did not change (a renewed
// certificate). systemd is told RELOADING=1 before and READY=1 after.
func (l *live) reload() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := sdnotify.Notify(sdnotify.Reloading()); err != nil {
		l.log.Warn("sd_notify failed", "err", err)
	}
	defer func() {
		if err := sdnotify.Notify("READY=1\nSTATUS=serving"); err != nil {
			l.log.Warn("sd_notify failed", "err", err)
		}
	}()
	cfg, err := loadConfig(l.path, l.o)
	if err != nil {
		l.log.Error("reload refused: configuration invalid; nothing changed", "err", err)
		return
	}
	lvl, err := cfg.Log.Level.Slog()
	if err != nil {
		l.log.Error("reload refused: configuration invalid; nothing changed", "err", err)
		return
	}
	// The changes are logged at the new level and in the new format.
	l.level.Set(lvl)
	l.logs.setFormat(cfg.Log.Format)
	applied, started, now := flatten(l.cfg), flatten(l.start), flatten(cfg)
	var changed []string
	for _, k := range sortedKeys(now) {
		// A TLS file of a listener that is off applies when a restart
		// turns the listener on.
		live := reloadable[k] &&
			!(strings.HasPrefix(k, "amqp.tls.") && l.amqpTLS == nil) &&
			!(strings.HasPrefix(k, "mgmt.tls.") && l.mgmtTLS == nil)
		old := started
		if live {
			old = applied
		}
		if reflect.DeepEqual(old[k], now[k]) {
			continue
		}
		changed = append(changed, k)
		switch {
		case live:
			l.log.Info("reload: setting changed", "key", k, "old", old[k], "new", now[k])
		case bootstrapOnly[k]:
			l.log.Warn("reload: setting changed; it applies to a fresh data directory only (manage users and vhosts with brokerctl or the HTTP API)", "key", k)
		default:
			l.log.Warn("reload: setting changed; it needs a restart to apply", "key", k, "old", old[k], "new", now[k])
		}
	}

	if l.srv != nil {
		l.srv.SetMaxConnections(maxConnections(cfg.Limits, l.fds, l.log))
	}
	if l.b != nil {
		l.b.SetConsumerTimeout(consumerTimeout(cfg.AMQP.ConsumerTimeout))
	}
	l.shutdownTimeout.Store(int64(cfg.Daemon.ShutdownTimeout))
	if cfg.Limits != l.cfg.Limits || cfg.AMQP.UnfinishedContentLimit != l.cfg.AMQP.UnfinishedContentLimit {
		mem := memoryLimit(cfg.Limits, l.log)
		alarm.SetGoMemoryLimit(mem)
		l.mon.SetLimits(mem, l.monitorDiskLimit(cfg.Limits))
		if l.storeDisk != nil {
			l.storeDisk(uint64(cfg.Limits.DiskFreeLimit))
		}
		if l.srv != nil {
			l.srv.SetMaxUnfinishedContentTotal(unfinishedContentLimit(cfg.AMQP, mem))
		}
	}
	for _, t := range []struct {
		name string
		src  *tlsSource
		cfg  config.TLS
	}{{"amqps", l.amqpTLS, cfg.AMQP.TLS}, {"https", l.mgmtTLS, cfg.Mgmt.TLS}} {
		if t.src == nil {
			continue
		}
		if err := t.src.reload(t.cfg); err != nil {
			l.log.Error("reload: TLS files not reloaded; the listener keeps its certificate", "listener", t.name, "err", err)
			continue
		}
		l.log.Info("reload: TLS certificate reloaded; new handshakes use it", "listener", t.name, "cert_file", t.cfg.CertFile)
	}
	l.cfg = cfg
	l.daemon.set(cfg, memoryLimit(cfg.Limits, l.log))
	l.log.Info("configuration reloaded", "log_level", lvl.String(), "changed", len(changed))
}

// attach gives a reload a cluster node's broker and AMQP server while the
// node leads, and applies to them what reloads changed since the start;
// detach takes them back when it stops.
func (l *live) attach(b *broker.Broker, srv *amqp.Server) (detach func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b, l.srv = b, srv
	srv.SetMaxConnections(maxConnections(l.cfg.Limits, l.fds, l.log))
	b.SetConsumerTimeout(consumerTimeout(l.cfg.AMQP.ConsumerTimeout))
	srv.SetMaxUnfinishedContentTotal(unfinishedContentLimit(l.cfg.AMQP, memoryLimit(l.cfg.Limits, l.log)))
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.b == b {
			l.b, l.srv = nil, nil
		}
	}
}

// monitorDiskLimit is the disk limit the resource monitor watches: none
// when the disk store watches its own space.
func (l *live) monitorDiskLimit(c config.Limits) uint64 {
	if l.storeDisk != nil {
		return 0
	}
	return uint64(c.DiskFreeLimit)
}

// timeout is daemon.shutdown_timeout as last reloaded.
func (l *live) timeout() time.Duration { return time.Duration(l.shutdownTimeout.Load()) }

// flatten maps each key of c ("amqp.tls.listen") to its value; an array
// of tables ("users") is one key.
func flatten(c config.Config) map[string]any {
	m := map[string]any{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if !f.IsExported() || tag == "" || tag == "-" {
				continue
			}
			key := prefix + tag
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(key+".", fv)
				continue
			}
			m[key] = fv.Interface()
		}
	}
	walk("", reflect.ValueOf(c))
	return m
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
