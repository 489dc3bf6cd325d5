package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// getJSON GETs url as guest and decodes its JSON object.
func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatalf("GET %s: %s, not a JSON object: %v", url, res.Status, err)
	}
	return res.StatusCode, m
}

// The daemon gives the management API every listener it has (AMQP,
// AMQPS with its certificate, the API's, the metrics port): the health
// checks port-listener, protocol-listener and certificate-expiration see
// them all, and the overview lists them.
func TestHealthChecksSeeTheListeners(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, _ := writeSelfSigned(t, dir) // expires in an hour
	metricsAddr := rebindableAddr(t)
	cfg := fmt.Sprintf("[amqp.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = %q\nkey_file = %q\n[metrics]\nlisten = %q\n",
		certFile, keyFile, metricsAddr)
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"))
	d.url()
	api := d.mgmtURL() + "/api"

	_, ov := getJSON(t, api+"/overview")
	var protos []string
	ports := map[string]int{}
	for _, l := range ov["listeners"].([]any) {
		m := l.(map[string]any)
		p := m["protocol"].(string)
		protos = append(protos, p)
		ports[p] = int(m["port"].(float64))
	}
	slices.Sort(protos)
	if fmt.Sprint(protos) != "[amqp amqp/ssl http http/prometheus]" {
		t.Fatalf("overview listeners %v, want amqp, amqp/ssl, http and http/prometheus", ov["listeners"])
	}
	if _, mp, _ := net.SplitHostPort(metricsAddr); strconv.Itoa(ports["http/prometheus"]) != mp {
		t.Errorf("metrics listener on port %d, want %s", ports["http/prometheus"], mp)
	}
	for p, port := range ports {
		if code, r := getJSON(t, api+"/health/checks/port-listener/"+strconv.Itoa(port)); code != 200 || r["status"] != "ok" {
			t.Errorf("port-listener %d (%s): %d %v", port, p, code, r)
		}
	}
	for _, p := range []string{"amqp", "amqps", "http", "http%2Fprometheus"} {
		if code, r := getJSON(t, api+"/health/checks/protocol-listener/"+p); code != 200 || r["status"] != "ok" {
			t.Errorf("protocol-listener %s: %d %v", p, code, r)
		}
	}
	if code, r := getJSON(t, api+"/health/checks/protocol-listener/https"); code != 503 {
		t.Errorf("protocol-listener https without an HTTPS listener: %d %v, want 503", code, r)
	}
	if code, r := getJSON(t, api+"/health/checks/certificate-expiration/1/days"); code != 503 ||
		fmt.Sprint(r["expired"].([]any)[0].(map[string]any)["certfile"]) != certFile {
		t.Errorf("certificate-expiration/1/days with a certificate expiring in an hour: %d %v, want 503 naming %s", code, r, certFile)
	}
}
