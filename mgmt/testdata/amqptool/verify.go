package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// expectFile is the schema of rabbitmq-3.10-definitions.expect.json; the
// README describes each field.
type expectFile struct {
	Logins      []login      `json:"logins"`
	Routes      []route      `json:"routes"`
	DeadLetters []deadLetter `json:"dead_letters"`
	Permissions []permCheck  `json:"permissions"`
}

type login struct {
	User     string `json:"user"`
	Password string `json:"password"`
	Vhost    string `json:"vhost"`
	// Expect is "ok"; "auth_refused" for a failed authentication (RabbitMQ
	// closes the socket, or sends 403 ACCESS_REFUSED to a client that
	// advertises authentication_failure_close; amqp091-go does not, so it
	// reports ErrCredentials, code 403 too); otherwise the prefix of the
	// connection.close text the broker refuses connection.open with.
	Expect     string `json:"expect"`
	ExpectCode int    `json:"expect_code,omitempty"`
	HTTPStatus int    `json:"http_whoami_status,omitempty"`
}

type route struct {
	Vhost        string     `json:"vhost"`
	User         string     `json:"user"`
	Password     string     `json:"password"`
	Exchange     string     `json:"exchange"`
	RoutingKey   string     `json:"routing_key"`
	Headers      amqp.Table `json:"headers"`
	ExpectQueues []string   `json:"expect_queues"`
	Note         string     `json:"note,omitempty"`
}

type publishSpec struct {
	Exchange   string     `json:"exchange"`
	RoutingKey string     `json:"routing_key"`
	Headers    amqp.Table `json:"headers"`
	Expiration string     `json:"expiration,omitempty"`
	Count      int        `json:"count"`
}

type deadLetter struct {
	Name     string      `json:"name"`
	Vhost    string      `json:"vhost"`
	User     string      `json:"user"`
	Password string      `json:"password"`
	Publish  publishSpec `json:"publish"`
	// Action is what makes the message dead: "reject" (basic.get then
	// basic.reject requeue=false from FromQueue), "expire" (wait),
	// "overflow" (the publishes themselves), or "delivery_limit" (basic.get
	// then basic.nack requeue=true from FromQueue until it is gone).
	Action string `json:"action"`
	// FromQueue is the queue the message dies in.
	FromQueue string `json:"from_queue"`
	// ExpectNacked lists the 1-based publishes the broker nacks.
	ExpectNacked []int `json:"expect_nacked,omitempty"`
	// ExpectDead lists the 1-based publishes that arrive in ExpectQueue, in
	// order.
	ExpectDead       []int      `json:"expect_dead"`
	ExpectDeliveries int        `json:"expect_deliveries,omitempty"`
	ExpectQueue      string     `json:"expect_queue"`
	ExpectExchange   string     `json:"expect_exchange"`
	ExpectRoutingKey string     `json:"expect_routing_key"`
	ExpectXDeath     []xDeath   `json:"expect_x_death"`
	ExpectFirstDeath firstDeath `json:"expect_first_death"`
	// Within bounds the wait for the dead-lettered message (TTL cases).
	WithinMS int `json:"within_ms"`
}

type xDeath struct {
	Queue       string   `json:"queue"`
	Reason      string   `json:"reason"`
	Exchange    string   `json:"exchange"`
	RoutingKeys []string `json:"routing-keys"`
	Count       int64    `json:"count"`
}

type firstDeath struct {
	Reason   string `json:"x-first-death-reason"`
	Queue    string `json:"x-first-death-queue"`
	Exchange string `json:"x-first-death-exchange"`
}

type permCheck struct {
	User     string `json:"user"`
	Password string `json:"password"`
	Vhost    string `json:"vhost"`
	// Op is "publish" (Exchange, RoutingKey), "queue.declare" (Queue),
	// "basic.get" (Queue), "queue.purge" (Queue) or "queue.bind"
	// (Queue, Exchange, RoutingKey).
	Op         string `json:"op"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
	Queue      string `json:"queue,omitempty"`
	// ExpectCode is 0 when the operation succeeds, otherwise the channel
	// close code; ExpectText is the prefix of the close text.
	ExpectCode int    `json:"expect_code"`
	ExpectText string `json:"expect_text,omitempty"`
}

// definitions holds the part of a definitions export verify needs: the
// queues of each vhost, to purge them and to prove where a message did not go.
type definitions struct {
	Queues []struct {
		Name  string `json:"name"`
		Vhost string `json:"vhost"`
	} `json:"queues"`
}

type verifier struct {
	amqpBase string // amqp://host:port
	httpBase string // http://host:port, or "" to skip HTTP checks
	queues   map[string][]string
	failures int
}

func verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	amqpAddr := fs.String("amqp", "127.0.0.1:5690", "AMQP host:port")
	httpBase := fs.String("http", "", "management base URL for the whoami check, e.g. http://127.0.0.1:15690")
	defsPath := fs.String("defs", "", "definitions file (for the queue list)")
	expectPath := fs.String("expect", "", "expect file")
	only := fs.String("only", "", "run only sections in this comma-separated list (logins,routes,dead_letters,permissions)")
	_ = fs.Parse(args)

	var defs definitions
	if err := readJSON(*defsPath, &defs); err != nil {
		return err
	}
	var exp expectFile
	if err := readJSON(*expectPath, &exp); err != nil {
		return err
	}
	v := &verifier{amqpBase: "amqp://" + *amqpAddr, httpBase: strings.TrimRight(*httpBase, "/"), queues: map[string][]string{}}
	for _, q := range defs.Queues {
		v.queues[q.Vhost] = append(v.queues[q.Vhost], q.Name)
	}
	want := func(s string) bool { return *only == "" || strings.Contains(","+*only+",", ","+s+",") }
	if want("logins") {
		for _, l := range exp.Logins {
			v.check(fmt.Sprintf("login %s@%s", l.User, l.Vhost), v.login(l))
		}
	}
	if want("routes") {
		for _, r := range exp.Routes {
			v.check(fmt.Sprintf("route %s %q %q %v", r.Vhost, r.Exchange, r.RoutingKey, r.Headers), v.route(r))
		}
	}
	if want("dead_letters") {
		for _, d := range exp.DeadLetters {
			v.check("dead letter "+d.Name, v.deadLetter(d))
		}
	}
	if want("permissions") {
		for _, p := range exp.Permissions {
			v.check(fmt.Sprintf("permission %s %s %s%s", p.User, p.Op, p.Exchange, p.Queue), v.permission(p))
		}
	}
	if v.failures > 0 {
		return fmt.Errorf("%d checks failed", v.failures)
	}
	return nil
}

func readJSON(path string, into interface{}) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

func (v *verifier) check(what string, err error) {
	if err != nil {
		v.failures++
		fmt.Printf("FAIL %s: %v\n", what, err)
		return
	}
	fmt.Printf("ok   %s\n", what)
}

func (v *verifier) dial(user, password, vhost string) (*amqp.Connection, error) {
	u := fmt.Sprintf("%s://%s:%s@%s/%s", "amqp", url.PathEscape(user), url.PathEscape(password),
		strings.TrimPrefix(v.amqpBase, "amqp://"), url.PathEscape(vhost))
	return amqp.DialConfig(u, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US"})
}

func (v *verifier) login(l login) error {
	conn, err := v.dial(l.User, l.Password, l.Vhost)
	if l.Expect == "ok" {
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		conn.Close()
	} else {
		if err == nil {
			conn.Close()
			return fmt.Errorf("login succeeded, want %d %q", l.ExpectCode, l.Expect)
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != l.ExpectCode || (l.Expect != "auth_refused" && !strings.HasPrefix(ae.Reason, l.Expect)) {
			return fmt.Errorf("got %v, want %d %q", err, l.ExpectCode, l.Expect)
		}
	}
	if v.httpBase == "" || l.HTTPStatus == 0 {
		return nil
	}
	req, err := http.NewRequest("GET", v.httpBase+"/api/whoami", nil)
	if err != nil {
		return fmt.Errorf("build whoami request: %w", err)
	}
	req.SetBasicAuth(l.User, l.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("whoami: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != l.HTTPStatus {
		return fmt.Errorf("whoami status %d, want %d", resp.StatusCode, l.HTTPStatus)
	}
	return nil
}

// session is one connection and channel of a check, closed together.
type session struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func (v *verifier) open(user, password, vhost string) (*session, error) {
	conn, err := v.dial(user, password, vhost)
	if err != nil {
		return nil, fmt.Errorf("dial %s@%s: %w", user, vhost, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return &session{conn: conn, ch: ch}, nil
}

func (s *session) close() { s.conn.Close() }

func (v *verifier) purgeAll(s *session, vhost string) error {
	for _, q := range v.queues[vhost] {
		if _, err := s.ch.QueuePurge(q, false); err != nil {
			return fmt.Errorf("purge %s: %w", q, err)
		}
	}
	return nil
}

func (v *verifier) route(r route) error {
	s, err := v.open(r.User, r.Password, r.Vhost)
	if err != nil {
		return err
	}
	defer s.close()
	if err := v.purgeAll(s, r.Vhost); err != nil {
		return err
	}
	body := fmt.Sprintf("route %s %s %v %d", r.Exchange, r.RoutingKey, r.Headers, time.Now().UnixNano())
	m := amqp.Publishing{Headers: r.Headers, Body: []byte(body)}
	if err := publishConfirmed(s.ch, r.Exchange, r.RoutingKey, false, m); err != nil {
		return err
	}
	var got []string
	for _, q := range v.queues[r.Vhost] {
		d, ok, err := s.ch.Get(q, true)
		if err != nil {
			return fmt.Errorf("basic.get %s: %w", q, err)
		}
		if ok {
			if string(d.Body) != body {
				return fmt.Errorf("queue %s holds %q, not the message published", q, d.Body)
			}
			got = append(got, q)
		}
	}
	want := append([]string(nil), r.ExpectQueues...)
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		return fmt.Errorf("landed in %v, want %v", got, want)
	}
	return nil
}

func (v *verifier) deadLetter(d deadLetter) error {
	s, err := v.open(d.User, d.Password, d.Vhost)
	if err != nil {
		return err
	}
	defer s.close()
	if err := v.purgeAll(s, d.Vhost); err != nil {
		return err
	}
	dlq, err := s.ch.Consume(d.ExpectQueue, "", true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", d.ExpectQueue, err)
	}
	count := d.Publish.Count
	if count == 0 {
		count = 1
	}
	pub, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open publisher channel: %w", err)
	}
	var nacked []int
	bodies := make([]string, count+1)
	for i := 1; i <= count; i++ {
		bodies[i] = fmt.Sprintf("%s #%d", d.Name, i)
		m := amqp.Publishing{Headers: d.Publish.Headers, Expiration: d.Publish.Expiration, Body: []byte(bodies[i])}
		err := publishConfirmed(pub, d.Publish.Exchange, d.Publish.RoutingKey, false, m)
		if errors.Is(err, errNacked) {
			nacked = append(nacked, i)
		} else if err != nil {
			return err
		}
	}
	if !reflect.DeepEqual(nacked, d.ExpectNacked) && !(len(nacked) == 0 && len(d.ExpectNacked) == 0) {
		return fmt.Errorf("nacked publishes %v, want %v", nacked, d.ExpectNacked)
	}

	switch d.Action {
	case "reject":
		m, ok, err := s.ch.Get(d.FromQueue, false)
		if err != nil || !ok {
			return fmt.Errorf("basic.get %s: ok=%v err=%v", d.FromQueue, ok, err)
		}
		if err := m.Reject(false); err != nil {
			return fmt.Errorf("reject: %w", err)
		}
	case "delivery_limit":
		deliveries := 0
		for {
			m, ok, err := s.ch.Get(d.FromQueue, false)
			if err != nil {
				return fmt.Errorf("basic.get %s: %w", d.FromQueue, err)
			}
			if !ok {
				break
			}
			deliveries++
			if err := m.Nack(false, true); err != nil {
				return fmt.Errorf("nack: %w", err)
			}
			if deliveries > 100 {
				return errors.New("message still redelivered after 100 nacks")
			}
		}
		if deliveries != d.ExpectDeliveries {
			return fmt.Errorf("delivered %d times before it was dead-lettered, want %d", deliveries, d.ExpectDeliveries)
		}
	case "expire", "overflow":
	default:
		return fmt.Errorf("unknown action %q", d.Action)
	}

	within := time.Duration(d.WithinMS) * time.Millisecond
	if within == 0 {
		within = 5 * time.Second
	}
	deadline := time.After(within)
	for _, i := range d.ExpectDead {
		select {
		case m := <-dlq:
			if string(m.Body) != bodies[i] {
				return fmt.Errorf("%s got %q, want %q", d.ExpectQueue, m.Body, bodies[i])
			}
			if err := checkDead(d, m); err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
		case <-deadline:
			return fmt.Errorf("message %d did not reach %s within %s", i, d.ExpectQueue, within)
		}
	}
	return nil
}

func checkDead(d deadLetter, m amqp.Delivery) error {
	if m.Exchange != d.ExpectExchange || m.RoutingKey != d.ExpectRoutingKey {
		return fmt.Errorf("delivered from exchange %q with key %q, want %q %q", m.Exchange, m.RoutingKey, d.ExpectExchange, d.ExpectRoutingKey)
	}
	raw, ok := m.Headers["x-death"].([]interface{})
	if !ok {
		return fmt.Errorf("no x-death array in headers %v", m.Headers)
	}
	var got []xDeath
	for _, e := range raw {
		t, ok := e.(amqp.Table)
		if !ok {
			return fmt.Errorf("x-death entry %v is not a table", e)
		}
		x := xDeath{}
		x.Queue, _ = t["queue"].(string)
		x.Reason, _ = t["reason"].(string)
		x.Exchange, _ = t["exchange"].(string)
		x.Count, _ = t["count"].(int64)
		keys, _ := t["routing-keys"].([]interface{})
		for _, k := range keys {
			ks, _ := k.(string)
			x.RoutingKeys = append(x.RoutingKeys, ks)
		}
		if _, ok := t["time"].(time.Time); !ok {
			return fmt.Errorf("x-death entry has no timestamp time: %v", t)
		}
		got = append(got, x)
	}
	if !reflect.DeepEqual(got, d.ExpectXDeath) {
		return fmt.Errorf("x-death %+v, want %+v", got, d.ExpectXDeath)
	}
	var fd firstDeath
	fd.Reason, _ = m.Headers["x-first-death-reason"].(string)
	fd.Queue, _ = m.Headers["x-first-death-queue"].(string)
	fd.Exchange, _ = m.Headers["x-first-death-exchange"].(string)
	if fd != d.ExpectFirstDeath {
		return fmt.Errorf("x-first-death %+v, want %+v", fd, d.ExpectFirstDeath)
	}
	return nil
}

func (v *verifier) permission(p permCheck) error {
	s, err := v.open(p.User, p.Password, p.Vhost)
	if err != nil {
		return err
	}
	defer s.close()
	closed := s.ch.NotifyClose(make(chan *amqp.Error, 1))
	var opErr error
	switch p.Op {
	case "publish":
		opErr = publishConfirmed(s.ch, p.Exchange, p.RoutingKey, false, amqp.Publishing{Body: []byte("permission check")})
	case "queue.declare":
		_, opErr = s.ch.QueueDeclare(p.Queue, true, false, false, false, nil)
	case "basic.get":
		_, _, opErr = s.ch.Get(p.Queue, true)
	case "queue.purge":
		_, opErr = s.ch.QueuePurge(p.Queue, false)
	case "queue.bind":
		opErr = s.ch.QueueBind(p.Queue, p.RoutingKey, p.Exchange, false, nil)
	default:
		return fmt.Errorf("unknown op %q", p.Op)
	}
	if p.ExpectCode == 0 {
		if opErr != nil {
			return fmt.Errorf("%s failed: %w", p.Op, opErr)
		}
		return nil
	}
	// A refused publish is reported asynchronously as a channel close;
	// publishConfirmed then fails waiting for its confirm.
	var ae *amqp.Error
	if !errors.As(opErr, &ae) {
		select {
		case ae = <-closed:
		case <-time.After(5 * time.Second):
		}
	}
	if ae == nil {
		return fmt.Errorf("%s: got %v, want channel close %d", p.Op, opErr, p.ExpectCode)
	}
	if ae.Code != p.ExpectCode || !strings.HasPrefix(withoutKind(ae.Reason), p.ExpectText) {
		return fmt.Errorf("%s: closed with %d %q, want %d %q", p.Op, ae.Code, ae.Reason, p.ExpectCode, p.ExpectText)
	}
	return nil
}

// withoutKind drops the permission kind RabbitMQ 3.12 and later (and
// brokerd) name in an access refusal ("ACCESS_REFUSED - write access to
// exchange ...") and 3.10 does not ("ACCESS_REFUSED - access to exchange
// ..."), so the file recorded on 3.10 checks both.
func withoutKind(reason string) string {
	for _, kind := range []string{"configure ", "write ", "read "} {
		if rest, ok := strings.CutPrefix(reason, "ACCESS_REFUSED - "+kind+"access to "); ok {
			return "ACCESS_REFUSED - access to " + rest
		}
	}
	return reason
}
