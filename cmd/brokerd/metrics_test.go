package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestMetricsServed checks the daemon's wiring of /metrics: served on the
// management listener without credentials, with the disk store's metrics
// and [metrics] per_queue_limit from the configuration file (0: queue
// metrics as aggregates only).
func TestMetricsServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte("[metrics]\nper_queue_limit = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	res, err := http.Get(d.mgmtURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics without credentials: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	if f := fams["brokerd_connections"]; f == nil || f.Metric[0].GetGauge().GetValue() != 1 {
		t.Errorf("brokerd_connections: %v, want 1", f)
	}
	if fams["brokerd_wal_fsync_duration_seconds"] == nil {
		t.Error("no WAL metrics from the disk store")
	}
	if f := fams["brokerd_queue_messages_ready"]; f == nil || len(f.Metric) != 1 || len(f.Metric[0].Label) != 0 {
		t.Errorf("brokerd_queue_messages_ready with per_queue_limit = 0: %v, want one series without labels", f)
	}
}

// scrape reads the metrics served at url.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// [metrics] listen serves the same metrics as the management listener's
// /metrics, and nothing else.
func TestMetricsPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	addr := rebindableAddr(t)
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("[metrics]\nlisten = %q\n", addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	fams := scrape(t, "http://"+addr+"/metrics")
	if f := fams["brokerd_connections"]; f == nil || f.Metric[0].GetGauge().GetValue() != 1 {
		t.Errorf("brokerd_connections: %v, want 1", f)
	}
	if fams["brokerd_wal_fsync_duration_seconds"] == nil {
		t.Error("no WAL metrics from the disk store")
	}
	res, err := http.Get("http://" + addr + "/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /api/overview on the metrics port: %s, want 404", res.Status)
	}
}
