package ctl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// nodeName is the node the server's overview names.
func (e *env) nodeName() string {
	e.t.Helper()
	var ov struct {
		Node string `json:"node"`
	}
	e.getJSON("api/overview", &ov)
	return ov.Node
}

// amqpPort is the port of the server's AMQP listener.
func (e *env) amqpPort() string {
	e.t.Helper()
	u, err := url.Parse(e.srv.amqp)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.Port()
}

// Every check passes against a running broker, with
// rabbitmq-diagnostics' texts; the usage errors are its.
func TestDiagnosticsChecksPass(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		n := e.nodeName()
		port := e.amqpPort()
		apiURL, _ := url.Parse(e.srv.api)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"check_running"}, "Checking if RabbitMQ is running on node " + n + " ...\nRabbitMQ on node " + n + " is fully booted and running\n"},
			{[]string{"is_running"}, "Asking node " + n + " for its status ...\nRabbitMQ on node " + n + " is fully booted and running\n"},
			{[]string{"check_local_alarms"}, "Asking node " + n + " to report any local resource alarms ...\nNode " + n + " reported no local alarms\n"},
			{[]string{"check_alarms"}, "Asking node " + n + " to report any local resource alarms ...\nNode " + n + " reported no alarms, local or clusterwide\n"},
			{[]string{"check_port_listener", port}, "Asking node " + n + " if there's an active listener on port " + port + " ...\nA listener for port " + port + " is running on node " + n + ".\n"},
			{[]string{"check_protocol_listener", "amqp091"}, "Asking node " + n + " if there's an active listener for protocol amqp091 ...\nA listener for protocol amqp is running on node " + n + ".\n"},
			{[]string{"check_virtual_hosts"}, "Checking if all vhosts are running on node " + n + " ...\nNode " + n + " reported all vhosts as running\n"},
			{[]string{"check_certificate_expiration"}, "Checking certificate expiration on node " + n + " ...\nNo certificates are expiring within 4 weeks.\n"},
			{[]string{"check_certificate_expiration", "--within", "1", "--unit", "days"}, "Checking certificate expiration on node " + n + " ...\nNo certificates are expiring within 1 day.\n"},
			{[]string{"-q", "check_running"}, "RabbitMQ on node " + n + " is fully booted and running\n"},
			// --silent: no output from the checks that honour it.
			{[]string{"-s", "check_alarms"}, ""},
			{[]string{"--silent", "check_local_alarms"}, ""},
			{[]string{"-s", "check_virtual_hosts"}, ""},
			{[]string{"--formatter", "json", "check_running"}, `{"message":"RabbitMQ on node ` + n + ` is fully booted and running"}` + "\n"},
			{[]string{"--formatter", "json", "is_running"}, `{"message":"RabbitMQ on node ` + n + ` is fully booted and running","result":true}` + "\n"},
			{[]string{"--formatter", "json", "check_alarms"}, `{"result":"ok"}` + "\n"},
			{[]string{"--formatter", "json", "check_local_alarms"}, `{"result":"ok"}` + "\n"},
			{[]string{"--formatter", "json", "check_virtual_hosts"}, `{"result":"ok"}` + "\n"},
			{[]string{"--formatter", "json", "check_certificate_expiration"}, `{"result":"ok"}` + "\n"},
			{[]string{"--formatter", "json", "check_port_listener", port}, `{"node":"` + n + `","port":` + port + `,"result":"ok"}` + "\n"},
			{[]string{"--formatter", "json", "check_protocol_listener", "amqp"}, `{"node":"` + n + `","protocol":"amqp","result":"ok"}` + "\n"},
		} {
			if got := e.ok(append([]string{"diagnostics"}, c.args...)...); got != c.want {
				t.Errorf("diagnostics %s:\n%q\nwant\n%q", strings.Join(c.args, " "), got, c.want)
			}
		}

		// check_port_connectivity connects to every listener's port.
		var ov struct {
			Listeners []struct {
				Port int `json:"port"`
			} `json:"listeners"`
		}
		e.getJSON("api/overview", &ov)
		var ports []int
		for _, l := range ov.Listeners {
			ports = append(ports, l.Port)
		}
		slices.Sort(ports)
		if !slices.Contains(ports, atoi(t, port)) || !slices.Contains(ports, atoi(t, apiURL.Port())) {
			t.Fatalf("overview listeners %v lack the AMQP port %s or the API's %s", ports, port, apiURL.Port())
		}
		if got, want := e.ok("diagnostics", "-q", "check_port_connectivity"),
			"Successfully connected to ports "+joinInts(ports)+" on node "+n+".\n"; got != want {
			t.Errorf("check_port_connectivity: %q, want %q", got, want)
		}
		var conn struct {
			Result    string           `json:"result"`
			Listeners []statusListener `json:"listeners"`
		}
		if err := json.Unmarshal([]byte(e.ok("diagnostics", "check_port_connectivity", "--formatter", "json")), &conn); err != nil ||
			conn.Result != "ok" || len(conn.Listeners) != len(ports) || conn.Listeners[0].Purpose == "" {
			t.Errorf("check_port_connectivity json: %+v %v", conn, err)
		}

		// rabbitmq-diagnostics' usage errors.
		e.fails(ExitDataErr, []string{"Argument must be a positive integer"}, "diagnostics", "check_port_listener", "http")
		e.fails(ExitUsage, []string{"not enough arguments"}, "diagnostics", "check_port_listener")
		e.fails(ExitUsage, []string{"unit 'fortnights' is not supported. Please use one of: days, weeks, months, years"},
			"diagnostics", "check_certificate_expiration", "--unit", "fortnights")
		e.fails(ExitUsage, []string{"Invalid options for this command", "--within"}, "diagnostics", "check_running", "--within", "3")
		// rabbitmqctl has none of the checks; rabbitmq-diagnostics has
		// not every rabbitmqctl verb.
		e.fails(ExitUsage, []string{"Command 'check_running' not found", "brokerctl diagnostics check_running"}, "check_running")
		e.fails(ExitUsage, []string{"Command 'list_users' not found"}, "diagnostics", "list_users")
		if out := e.ok("diagnostics", "-q", "ping"); out != "Ping succeeded\n" {
			t.Errorf("diagnostics ping: %q", out)
		}
		if r := e.ctl("diagnostics"); r.code != ExitUsage || !strings.Contains(r.stderr, "check_certificate_expiration") {
			t.Errorf("diagnostics alone: %v", r)
		}
		if out := e.ok("help", "check_port_listener"); !strings.Contains(out, " diagnostics check_port_listener <port>\n") {
			t.Errorf("help check_port_listener:\n%s", out)
		}
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Each check fails as rabbitmq-diagnostics' does, exit 69 and its text
// on standard error: against the brokerds of the other tests for a
// missing port or protocol, and against one with its memory alarm raised
// (a watermark of 1 MiB) and an AMQPS listener whose certificate expires
// in an hour.
func TestDiagnosticsChecksFail(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		n := e.nodeName()
		closed := closedAddr(t)
		_, cp, _ := net.SplitHostPort(closed)
		r := e.fails(ExitUnavailable, []string{"No listener for port " + cp + " is active on node " + n + ". Found listeners that use the following ports: "},
			"diagnostics", "check_port_listener", cp)
		if r.stdout != "Asking node "+n+" if there's an active listener on port "+cp+" ...\n" ||
			strings.Contains(r.stderr, "Error:") || !strings.Contains(r.stderr, e.amqpPort()) {
			t.Errorf("check_port_listener of a closed port: %v", r)
		}
		r = e.fails(ExitUnavailable, nil, "diagnostics", "--formatter", "json", "check_port_listener", cp)
		var fail struct {
			Result    string           `json:"result"`
			Missing   int              `json:"missing"`
			Ports     []int            `json:"ports"`
			Listeners []statusListener `json:"listeners"`
		}
		if err := json.Unmarshal([]byte(r.stderr), &fail); err != nil || fail.Result != "error" || strconv.Itoa(fail.Missing) != cp ||
			!slices.Contains(fail.Ports, atoi(t, e.amqpPort())) || len(fail.Listeners) != len(fail.Ports) {
			t.Errorf("check_port_listener json: %+v %v\n%v", fail, err, r)
		}
		r = e.fails(ExitUnavailable, []string{"Error:\nNo listener for protocol mqtt is active on node " + n + ". Found listeners for the following protocols: amqp, "},
			"diagnostics", "check_protocol_listener", "MQTT311")
		if r.stdout != "Asking node "+n+" if there's an active listener for protocol MQTT311 ...\n" {
			t.Errorf("check_protocol_listener: %v", r)
		}
		// A user the API refuses: 77, as every verb.
		e.fails(ExitNoPerm, []string{"refused user"}, "diagnostics", "check_running", "--password", "wrong")
	})

	if daemonOf(servers(t)[0]) == nil {
		return // an external server: its alarms and certificates are its own
	}
	dir := t.TempDir()
	certFile, keyFile := writeExpiringCert(t, dir, time.Hour)
	cfg := fmt.Sprintf("[limits]\nmemory_high_watermark_bytes = \"1MiB\"\n[amqp.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile)
	d := startBrokerdConfig("checks-fail", "memory", "127.0.0.1:0", cfg)
	daemons.Lock()
	daemons.byEngine["checks-fail"] = d // TestMain stops it
	daemons.Unlock()
	if d.err != nil {
		t.Fatalf("brokerd: %v\n%s", d.err, d.log())
	}
	e := newEnv(t, d.srv)
	n := e.nodeName()
	// The alarm is raised once connection.blocked says so. The plain
	// AMQP listener is the overview's (the log names the AMQPS one too).
	var ov struct {
		Listeners []struct {
			Protocol string `json:"protocol"`
			Port     int    `json:"port"`
		} `json:"listeners"`
	}
	e.getJSON("api/overview", &ov)
	amqpURL := ""
	for _, l := range ov.Listeners {
		if l.Protocol == "amqp" {
			amqpURL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", l.Port)
		}
	}
	// A blocked connection's Close would wait for a close-ok the broker
	// does not send while it reads nothing: the test closes the socket.
	var raw net.Conn
	c, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: func(network, addr string) (net.Conn, error) {
		conn, err := net.Dial(network, addr)
		raw = conn
		return conn, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	blocked := c.NotifyBlocked(make(chan amqp091.Blocking, 1))
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "nowhere", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-blocked:
		if !b.Active {
			t.Fatalf("blocking %+v", b)
		}
	case <-time.After(30 * time.Second): // a bound on the wait, not a synchronisation
		t.Fatalf("no memory alarm under a 1 MiB watermark:\n%s", d.log())
	}

	r := e.fails(ExitUnavailable, nil, "diagnostics", "check_alarms")
	if want := "Asking node " + n + " to report any local resource alarms ...\n"; r.stdout != want || r.stderr != "Memory alarm on node "+n+"\n" {
		t.Errorf("check_alarms with the memory alarm: %v", r)
	}
	r = e.fails(ExitUnavailable, nil, "diagnostics", "-q", "check_local_alarms")
	if r.stdout != "" || r.stderr != "Error:\nMemory alarm on node "+n+"\n" {
		t.Errorf("check_local_alarms with the memory alarm: %v", r)
	}
	if r := e.fails(ExitUnavailable, nil, "diagnostics", "-s", "check_alarms"); r.stdout != "" || r.stderr != "" {
		t.Errorf("check_alarms -s: %v", r)
	}
	r = e.fails(ExitUnavailable, nil, "diagnostics", "--formatter", "json", "check_alarms")
	if want := `{"global":[],"local":["Memory alarm on node ` + n + `"],"message":"Node ` + n + ` reported alarms","result":"error"}` + "\n"; r.stderr != want || r.stdout != "" {
		t.Errorf("check_alarms json: %v\nwant stderr %s", r, want)
	}
	r = e.fails(ExitUnavailable, nil, "diagnostics", "--formatter", "json", "check_local_alarms")
	if want := `{"local":["Memory alarm on node ` + n + `"],"message":"Node ` + n + ` reported local alarms","result":"error"}` + "\n"; r.stderr != want {
		t.Errorf("check_local_alarms json: %v\nwant stderr %s", r, want)
	}

	// The certificate expires within 4 weeks and within a day, not
	// within a minute... which the API's units do not express: 0 days.
	r = e.fails(ExitUnavailable, []string{`certfile: "` + certFile + `"`, `protocol: "amqp/ssl"`, "certfile_expires_on: [\""}, "diagnostics", "check_certificate_expiration")
	if r.stdout != "Checking certificate expiration on node "+n+" ...\n" || strings.Contains(r.stderr, "Error:") {
		t.Errorf("check_certificate_expiration: %v", r)
	}
	r = e.fails(ExitUnavailable, nil, "diagnostics", "check_certificate_expiration", "--within", "1", "--unit", "days", "--formatter", "json")
	var exp struct {
		Result  string            `json:"result"`
		Expired []expiredListener `json:"expired"`
	}
	if err := json.Unmarshal([]byte(r.stderr), &exp); err != nil || exp.Result != "error" || len(exp.Expired) != 1 ||
		exp.Expired[0].CertFile != certFile || exp.Expired[0].Protocol != "amqp/ssl" || len(exp.Expired[0].CertFileExpiresOn) != 1 ||
		exp.Expired[0].Purpose != "AMQP 0-9-1 over TLS" || exp.Expired[0].Node != n {
		t.Errorf("check_certificate_expiration json: %+v %v\n%v", exp, err, r)
	}
	if out := e.ok("diagnostics", "-q", "check_certificate_expiration", "--within", "0", "--unit", "days"); out != "No certificates are expiring within 0 days.\n" {
		t.Errorf("check_certificate_expiration --within 0: %q", out)
	}
	// The alarm does not stop the broker running.
	e.ok("diagnostics", "check_running")
	if out := e.ok("diagnostics", "-q", "check_protocol_listener", "amqps"); out != "A listener for protocol amqp/ssl is running on node "+n+".\n" {
		t.Errorf("check_protocol_listener amqps: %q", out)
	}
}

// writeExpiringCert writes a self-signed certificate for 127.0.0.1 that
// expires after d, and its key.
func writeExpiringCert(t *testing.T, dir string, d time.Duration) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(d),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// authenticate_user checks the password through a login of the user
// itself: a user without any management tag (which the API refuses) is
// authenticated too; a wrong password or an unknown user is refused with
// rabbitmqctl's text and 65.
func TestAuthenticateUser(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		plain, admin := e.user("plain"), e.user("admin")
		for u, tags := range map[string]string{plain: "", admin: "administrator"} {
			if st, body := e.api("PUT", apiPath("users", u), map[string]any{"password": "s3cret", "tags": tags}); st/100 != 2 {
				t.Fatalf("add user %s: %d %s", u, st, body)
			}
		}
		for _, u := range []string{plain, admin} {
			if out := e.ok("authenticate_user", u, "s3cret"); out != "Authenticating user \""+u+"\" ...\nSuccess\n" {
				t.Errorf("authenticate_user %s: %q", u, out)
			}
		}
		if out := e.ok("-q", "authenticate_user", plain, "s3cret"); out != "Success\n" {
			t.Errorf("authenticate_user -q: %q", out)
		}
		if out := e.ok("--formatter", "json", "authenticate_user", plain, "s3cret"); out != `{"message":"Success"}`+"\n" {
			t.Errorf("authenticate_user json: %q", out)
		}
		// The password from standard input.
		if r := e.ctlIn("s3cret\n", "-q", "authenticate_user", plain); r.code != 0 || r.stdout != "Success\n" {
			t.Errorf("authenticate_user with the password on stdin: %v", r)
		}
		r := e.ctlIn("", "authenticate_user", plain)
		if r.code != ExitSoftware || !strings.Contains(r.stderr, "Password is not provided via argument or stdin") {
			t.Errorf("authenticate_user without a password: %v", r)
		}
		for _, c := range [][2]string{{plain, "wrong"}, {admin, ""}, {e.user("nobody"), "s3cret"}} {
			r := e.fails(ExitDataErr, nil, "authenticate_user", c[0], c[1])
			if want := "Error:\nError: failed to authenticate user \"" + c[0] + "\"\nuser '" + c[0] + "' - invalid credentials\n"; r.stderr != want {
				t.Errorf("authenticate_user %s %q: stderr %q, want %q", c[0], c[1], r.stderr, want)
			}
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "authenticate_user", "a", "b", "c")
	})
}
