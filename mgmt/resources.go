package mgmt

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// Queues, exchanges and bindings. Declarations, deletions, purges and gets
// run through a broker.Direct acting as the requesting user, so they are
// checked and refused as the same AMQP methods are.

func (s *Server) resourceRoutes() {
	s.handle("GET /api/queues", management, s.listQueues)
	s.handle("GET /api/queues/{vhost}", management, s.listQueues)
	s.handle("GET /api/queues/{vhost}/{name}", management, s.getQueue)
	s.handle("PUT /api/queues/{vhost}/{name}", management, s.putQueue, checked(s.mayAccess(broker.Configure, "queue", "name")))
	s.handle("DELETE /api/queues/{vhost}/{name}", management, s.deleteQueue)
	s.handle("DELETE /api/queues/{vhost}/{name}/contents", management, s.purgeQueue)
	s.handle("POST /api/queues/{vhost}/{name}/get", management, s.getMessages, checked(onChannel(s.mayAccess(broker.Read, "queue", "name"))))
	s.handle("GET /api/queues/{vhost}/{name}/peek", management, s.peekMessages)
	s.handle("POST /api/queues/{vhost}/{name}/redrive", management, s.redrive, checked(s.mayAccess(broker.Read, "queue", "name")))
	s.handle("GET /api/redrives", management, s.redrives)
	s.handle("GET /api/redrives/{id}", management, s.redriveTask)
	s.handle("DELETE /api/redrives/{id}", management, s.cancelRedrive)
	s.handle("GET /api/redrives/{id}/failures", management, s.redriveFailures)
	s.handle("GET /api/queues/{vhost}/{name}/bindings", management, s.queueBindings)

	s.handle("GET /api/exchanges", management, s.listExchanges)
	s.handle("GET /api/exchanges/{vhost}", management, s.listExchanges)
	s.handle("GET /api/exchanges/{vhost}/{name}", management, s.getExchange)
	s.handle("PUT /api/exchanges/{vhost}/{name}", management, s.putExchange, checked(s.mayAccess(broker.Configure, "exchange", "name")))
	s.handle("DELETE /api/exchanges/{vhost}/{name}", management, s.deleteExchange)
	s.handle("POST /api/exchanges/{vhost}/{name}/publish", management, s.publish, checked(s.mayAccess(broker.Write, "exchange", "name")))
	s.handle("GET /api/exchanges/{vhost}/{name}/scheduled", management, s.listScheduled)
	s.handle("DELETE /api/exchanges/{vhost}/{name}/scheduled/{id}", management, s.cancelScheduledOne)
	s.handle("POST /api/exchanges/{vhost}/{name}/scheduled/cancel", management, s.cancelScheduled,
		checked(s.mayAccess(broker.Read, "exchange", "name")), checked(s.mayAccess(broker.Write, "exchange", "name")))
	s.handle("GET /api/exchanges/{vhost}/{name}/bindings/source", management, s.exchangeBindings("source"))
	s.handle("GET /api/exchanges/{vhost}/{name}/bindings/destination", management, s.exchangeBindings("destination"))

	s.handle("GET /api/bindings", management, s.listBindings)
	s.handle("GET /api/bindings/{vhost}", management, s.listBindings)
	for _, kind := range []string{"q", "e"} {
		base := "/api/bindings/{vhost}/e/{source}/" + kind + "/{dest}"
		s.handle("GET "+base, management, s.bindingsBetween(kind))
		s.handle("POST "+base, management, s.postBinding(kind), checked(s.mayBind(kind)))
		s.handle("GET "+base+"/{props}", management, s.getBinding(kind))
		s.handle("DELETE "+base+"/{props}", management, s.deleteBinding(kind))
	}
}

// exchangeName maps a name in a path to an exchange: amq.default is the
// default exchange, "".
func exchangeName(s string) string {
	if s == "amq.default" {
		return ""
	}
	return s
}

func (s *Server) queueJSON(qi broker.QueueInfo) map[string]any {
	m := map[string]any{
		"name": qi.Name, "vhost": qi.VHost, "durable": qi.Durable, "auto_delete": qi.AutoDelete,
		"exclusive": qi.Exclusive, "arguments": tableJSON(qi.Arguments), "type": qi.Type,
		"node": s.node(), "state": "running",
		"policy": nullable(qi.Policy), "operator_policy": nullable(qi.OperatorPolicy),
		"effective_policy_definition": orEmpty(qi.EffectivePolicyDefinition),
		"messages":                    qi.Messages(), "messages_ready": qi.Ready, "messages_unacknowledged": qi.Unacked,
		"message_bytes":                qi.ReadyBytes + qi.UnackedBytes,
		"message_bytes_ready":          qi.ReadyBytes,
		"message_bytes_unacknowledged": qi.UnackedBytes,
		"consumers":                    qi.Consumers,
		"exclusive_consumer_tag":       nil,
		"single_active_consumer_tag":   nil,
		"head_message_timestamp":       qi.HeadTimestamp, // seconds, or null
		// brokerd's own: dead letters waiting for a route (at-least-once,
		// counted in messages) and dead-lettered totals by reason.
		"dead_letter_backlog": qi.DeadLetterBacklog,
		"dead_lettered":       qi.DeadLettered,
		// Messages lost to damaged data on disk (broker/damage.go).
		"messages_damaged": qi.Damaged,
		// Messages waiting out a retry delay (RabbitMQ 4.3's quorum
		// queue stat; counted in messages, not in messages_ready).
		"messages_delayed": qi.Delayed,

		// Bodies and properties held in memory (message_bytes counts
		// bodies only, as RabbitMQ's classic queues do).
		"memory": qi.Memory,
	}
	if ms := queueMessageStats(qi); ms != nil {
		m["message_stats"] = ms
	}
	if qi.ExclusiveOwner != "" {
		m["owner_pid_details"] = map[string]any{"name": qi.ExclusiveOwner}
	}
	return m
}

// queueMessageStats is a queue's message_stats, grouped as RabbitMQ 3.10
// reports them: publish once a publish reached the queue; the delivery
// counters (deliver, deliver_no_ack, get, get_no_ack, deliver_get,
// get_empty, redeliver, ack) together once any of them is non-zero; and
// brokerd's dead_lettered (messages dead-lettered from the queue to at
// least one target, any reason) once non-zero. A queue with none of
// these has no message_stats, as in RabbitMQ. No *_details rates
// (rates_mode none): a client computes them from two reads.
func queueMessageStats(qi broker.QueueInfo) map[string]any {
	ms := map[string]any{}
	st := qi.MessageStats
	if st.Publish > 0 {
		ms["publish"] = st.Publish
	}
	deliveryStats(ms, st)
	var dl uint64
	for _, n := range qi.DeadLettered {
		dl += n
	}
	if dl > 0 {
		ms["dead_lettered"] = dl
	}
	if len(ms) == 0 {
		return nil
	}
	return ms
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) listQueues(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, v := range s.vhostsFor(u, r.PathValue("vhost")) {
		for _, qi := range s.b.Queues(v) {
			m := s.queueJSON(qi)
			s.queueRates(m, qi.VHost, qi.Name, rateQueryOf(r))
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Server) getQueue(u *broker.UserInfo, r *http.Request) (any, error) {
	qi, err := s.b.Queue(r.PathValue("vhost"), r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	m := s.queueJSON(qi)
	s.queueRates(m, qi.VHost, qi.Name, rateQueryOf(r))
	details := []map[string]any{}
	for _, c := range s.b.Consumers(qi.VHost) {
		if c.Queue != qi.Name {
			continue
		}
		details = append(details, consumerJSON(c))
	}
	m["consumer_details"] = details
	return m, nil
}

// withDirect runs fn on a Direct acting as u in vhost.
func (s *Server) withDirect(u *broker.UserInfo, vhost string, fn func(d *broker.Direct) error) error {
	d, err := s.b.OpenDirect(u.Name, vhost)
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(d)
}

// do runs m on d and returns an *amqp.Error as an error (nil stays nil).
func do(d *broker.Direct, m amqp.Method) ([]broker.Reply, error) {
	replies, aerr := d.Do(m)
	if aerr != nil {
		return replies, aerr
	}
	return replies, nil
}

// queueBody is a PUT of a queue; what it leaves out takes queue.declare's
// defaults, as RabbitMQ's: not durable, not auto-delete. The booleans
// take RabbitMQ's string forms too (jsonBool: rabbitmqadmin sends
// "durable": "true").
type queueBody struct {
	Durable    jsonBool       `json:"durable"`
	AutoDelete jsonBool       `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
	Node       string         `json:"node"`
}

func (s *Server) putQueue(u *broker.UserInfo, r *http.Request) (any, error) {
	var body queueBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	args, err := tableFromJSON(body.Arguments)
	if err != nil {
		return nil, badRequest("arguments: %s", err)
	}
	vhost, name := r.PathValue("vhost"), r.PathValue("name")
	_, lookupErr := s.b.Queue(vhost, name)
	m := &amqp.QueueDeclare{Queue: name, Durable: bool(body.Durable), AutoDelete: bool(body.AutoDelete), Arguments: args}
	if err := s.checkMethod(m); err != nil {
		return nil, err
	}
	if err := s.withDirect(u, vhost, func(d *broker.Direct) error { _, err := do(d, m); return err }); err != nil {
		return nil, err
	}
	if lookupErr == nil { // it existed: nothing created
		return noContent{}, nil
	}
	return created{}, nil
}

func queryBool(r *http.Request, key string) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get(key))
	return v
}

func (s *Server) deleteQueue(u *broker.UserInfo, r *http.Request) (any, error) {
	if _, err := s.b.Queue(r.PathValue("vhost"), r.PathValue("name")); err != nil {
		return nil, err // queue.delete of no queue is fine over AMQP, 404 here
	}
	m := &amqp.QueueDelete{Queue: r.PathValue("name"), IfUnused: queryBool(r, "if-unused"), IfEmpty: queryBool(r, "if-empty")}
	return noContent{}, s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error { _, err := do(d, m); return err })
}

func (s *Server) purgeQueue(u *broker.UserInfo, r *http.Request) (any, error) {
	if _, err := s.b.Queue(r.PathValue("vhost"), r.PathValue("name")); err != nil {
		return nil, err // 404 Object Not Found, as RabbitMQ's
	}
	m := &amqp.QueuePurge{Queue: r.PathValue("name")}
	return noContent{}, s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error { _, err := do(d, m); return err })
}

type getBody struct {
	Count    *jsonInt `json:"count"`
	AckMode  string   `json:"ackmode"`
	Encoding string   `json:"encoding"`
	Truncate *jsonInt `json:"truncate"`
}

// getMessages is POST .../get: up to count messages fetched with
// basic.get, then settled as ackmode says: ack_requeue_false acks them,
// ack_requeue_true and reject_requeue_true put them back (redelivered),
// reject_requeue_false rejects them (dead-lettering them where a DLX is
// set). Fetching stops early once Options.MaxGetBytes is collected, or
// when the client goes (the messages then go back unsettled).
func (s *Server) getMessages(u *broker.UserInfo, r *http.Request) (any, error) {
	var body getBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range []struct {
		key     string
		missing bool
	}{{"ackmode", body.AckMode == ""}, {"count", body.Count == nil}, {"encoding", body.Encoding == ""}} {
		if f.missing {
			missing = append(missing, "{key_missing,"+f.key+"}")
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("[%s]", strings.Join(missing, ","))
	}
	var settle func(tag uint64) amqp.Method
	switch body.AckMode {
	case "ack_requeue_false":
		settle = func(tag uint64) amqp.Method { return &amqp.BasicAck{DeliveryTag: tag, Multiple: true} }
	case "ack_requeue_true", "reject_requeue_true":
		settle = func(tag uint64) amqp.Method { return &amqp.BasicNack{DeliveryTag: tag, Multiple: true, Requeue: true} }
	case "reject_requeue_false":
		settle = func(tag uint64) amqp.Method { return &amqp.BasicNack{DeliveryTag: tag, Multiple: true, Requeue: false} }
	default: // RabbitMQ fails with a 500
		return nil, badRequest("Unsupported ackmode %s. Please use ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false.", body.AckMode)
	}
	if body.Encoding != "auto" && body.Encoding != "base64" {
		return nil, badRequest("Unsupported encoding. Please use auto or base64.")
	}
	out := []map[string]any{}
	err := s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var last uint64
		var collected int64
		for range *body.Count {
			if collected >= s.opts.MaxGetBytes {
				break
			}
			if err := r.Context().Err(); err != nil {
				return err
			}
			replies, aerr := d.Do(&amqp.BasicGet{Queue: r.PathValue("name")})
			if aerr != nil {
				return channelError{aerr}
			}
			if len(replies) != 1 {
				break
			}
			ok, isOK := replies[0].Method.(*amqp.BasicGetOk)
			if !isOK {
				break // get-empty
			}
			last = ok.DeliveryTag
			collected += int64(len(replies[0].Props)+len(replies[0].Body)) + getOverhead
			props, err := amqp.DecodeProperties(replies[0].Props)
			if err != nil {
				return err
			}
			out = append(out, messageJSON(ok, props, replies[0].Body, body.Encoding, body.Truncate))
		}
		if last != 0 {
			if _, err := do(d, settle(last)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// getOverhead is what a message of a /get costs beyond its body and
// properties (the reply's fields), counted against MaxGetBytes.
const getOverhead = 256

// channelError is a refusal RabbitMQ reports as its channel saw it, with
// the reply name ("NOT_FOUND - no queue ..."): a get runs on a channel.
type channelError struct{ e *amqp.Error }

func (c channelError) Error() string { return c.e.Error() }

func messageJSON(ok *amqp.BasicGetOk, props amqp.Properties, body []byte, encoding string, truncate *jsonInt) map[string]any {
	m := map[string]any{
		"payload_bytes": len(body), "redelivered": ok.Redelivered, "exchange": ok.Exchange,
		"routing_key": ok.RoutingKey, "message_count": ok.MessageCount, "properties": propertiesJSON(props),
	}
	if truncate != nil && *truncate >= 0 && int(*truncate) < len(body) {
		body = body[:*truncate]
	}
	if encoding != "base64" && utf8.Valid(body) {
		m["payload"], m["payload_encoding"] = string(body), "string"
	} else {
		m["payload"], m["payload_encoding"] = base64.StdEncoding.EncodeToString(body), "base64"
	}
	return m
}

func (s *Server) queueBindings(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, name := r.PathValue("vhost"), r.PathValue("name")
	if _, err := s.b.Queue(vhost, name); err != nil {
		return nil, err
	}
	return filterBindings(s.b.Bindings(vhost), func(bi broker.BindingInfo) bool {
		return bi.DestinationType == "queue" && bi.Destination == name
	}), nil
}

func exchangeJSON(xi broker.ExchangeInfo) map[string]any {
	m := map[string]any{
		"name": xi.Name, "vhost": xi.VHost, "type": xi.Type, "durable": xi.Durable,
		"auto_delete": xi.AutoDelete, "internal": xi.Internal, "arguments": tableJSON(xi.Arguments),
		"user_who_performed_action": "rmq-internal",
	}
	if xi.Policy != "" {
		m["policy"] = xi.Policy
	}
	if xi.Delayed {
		m["messages_delayed"] = xi.MessagesDelayed // the plugin's info item
	}
	return m
}

func (s *Server) listExchanges(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, v := range s.vhostsFor(u, r.PathValue("vhost")) {
		for _, xi := range s.b.Exchanges(v) {
			m := exchangeJSON(xi)
			s.exchangeRates(m, xi, rateQueryOf(r))
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Server) getExchange(u *broker.UserInfo, r *http.Request) (any, error) {
	xi, err := s.b.Exchange(r.PathValue("vhost"), exchangeName(r.PathValue("name")))
	if err != nil {
		return nil, err
	}
	m := exchangeJSON(xi)
	s.exchangeRates(m, xi, rateQueryOf(r))
	return m, nil
}

// exchangeBody is a PUT of an exchange; what it leaves out takes
// exchange.declare's defaults, as RabbitMQ's: type direct, not durable.
// The booleans take RabbitMQ's string forms too, as queueBody's.
type exchangeBody struct {
	Type       string         `json:"type"`
	Durable    jsonBool       `json:"durable"`
	AutoDelete jsonBool       `json:"auto_delete"`
	Internal   jsonBool       `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

func (s *Server) putExchange(u *broker.UserInfo, r *http.Request) (any, error) {
	var body exchangeBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	if body.Type == "" {
		body.Type = "direct"
	}
	args, err := tableFromJSON(body.Arguments)
	if err != nil {
		return nil, badRequest("arguments: %s", err)
	}
	vhost, name := r.PathValue("vhost"), exchangeName(r.PathValue("name"))
	_, lookupErr := s.b.Exchange(vhost, name)
	m := &amqp.ExchangeDeclare{Exchange: name, Type: body.Type, Durable: bool(body.Durable),
		AutoDelete: bool(body.AutoDelete), Internal: bool(body.Internal), Arguments: args}
	if err := s.checkMethod(m); err != nil {
		return nil, err
	}
	if err := s.withDirect(u, vhost, func(d *broker.Direct) error { _, err := do(d, m); return err }); err != nil {
		return nil, err
	}
	if lookupErr == nil { // it existed: nothing created
		return noContent{}, nil
	}
	return created{}, nil
}

func (s *Server) deleteExchange(u *broker.UserInfo, r *http.Request) (any, error) {
	if _, err := s.b.Exchange(r.PathValue("vhost"), exchangeName(r.PathValue("name"))); err != nil {
		return nil, err
	}
	m := &amqp.ExchangeDelete{Exchange: exchangeName(r.PathValue("name")), IfUnused: queryBool(r, "if-unused")}
	return noContent{}, s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error { _, err := do(d, m); return err })
}

func (s *Server) exchangeBindings(side string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		vhost, name := r.PathValue("vhost"), exchangeName(r.PathValue("name"))
		if _, err := s.b.Exchange(vhost, name); err != nil {
			return nil, err
		}
		return filterBindings(s.b.Bindings(vhost), func(bi broker.BindingInfo) bool {
			if side == "source" {
				return bi.Source == name
			}
			return bi.DestinationType == "exchange" && bi.Destination == name
		}), nil
	}
}

func bindingJSON(bi broker.BindingInfo) map[string]any {
	return map[string]any{
		"source": bi.Source, "vhost": bi.VHost, "destination": bi.Destination,
		"destination_type": bi.DestinationType, "routing_key": bi.RoutingKey,
		"arguments": tableJSON(bi.Arguments), "properties_key": bi.PropertiesKey(),
	}
}

func filterBindings(bs []broker.BindingInfo, keep func(broker.BindingInfo) bool) []map[string]any {
	out := []map[string]any{}
	for _, bi := range bs {
		if keep(bi) {
			out = append(out, bindingJSON(bi))
		}
	}
	return out
}

func (s *Server) listBindings(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, v := range s.vhostsFor(u, r.PathValue("vhost")) {
		out = append(out, filterBindings(s.b.Bindings(v), func(broker.BindingInfo) bool { return true })...)
	}
	return out, nil
}

// between returns the bindings from source to dest (kind "q" or "e"),
// checking both exist.
func (s *Server) between(r *http.Request, kind string) ([]broker.BindingInfo, error) {
	vhost, source, dest := r.PathValue("vhost"), exchangeName(r.PathValue("source")), r.PathValue("dest")
	if _, err := s.b.Exchange(vhost, source); err != nil {
		return nil, err
	}
	destType := "queue"
	if kind == "e" {
		destType = "exchange"
		if _, err := s.b.Exchange(vhost, dest); err != nil {
			return nil, err
		}
	} else if _, err := s.b.Queue(vhost, dest); err != nil {
		return nil, err
	}
	var out []broker.BindingInfo
	for _, bi := range s.b.Bindings(vhost) {
		if bi.Source == source && bi.DestinationType == destType && bi.Destination == dest {
			out = append(out, bi)
		}
	}
	return out, nil
}

func (s *Server) bindingsBetween(kind string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		bs, err := s.between(r, kind)
		if err != nil {
			return nil, err
		}
		return filterBindings(bs, func(broker.BindingInfo) bool { return true }), nil
	}
}

type bindingBody struct {
	RoutingKey string         `json:"routing_key"`
	Arguments  map[string]any `json:"arguments"`
}

func bindMethod(kind, source, dest, key string, args amqp.Table, bind bool) amqp.Method {
	switch {
	case kind == "q" && bind:
		return &amqp.QueueBind{Queue: dest, Exchange: source, RoutingKey: key, Arguments: args}
	case kind == "q":
		return &amqp.QueueUnbind{Queue: dest, Exchange: source, RoutingKey: key, Arguments: args}
	case bind:
		return &amqp.ExchangeBind{Destination: dest, Source: source, RoutingKey: key, Arguments: args}
	}
	return &amqp.ExchangeUnbind{Destination: dest, Source: source, RoutingKey: key, Arguments: args}
}

// mayBind is postBinding's precheck, in the channel's order: write on the
// destination, then (unless either side is the default exchange, which the
// channel refuses) read on the source.
func (s *Server) mayBind(kind string) precheck {
	return func(u *broker.UserInfo, r *http.Request) error {
		vhost, source, dest := r.PathValue("vhost"), exchangeName(r.PathValue("source")), r.PathValue("dest")
		destKind := "queue"
		if kind == "e" {
			destKind = "exchange"
		}
		if err := s.checkAccess(u, vhost, broker.Write, destKind, dest); err != nil {
			return err
		}
		if source == "" || kind == "e" && dest == "" {
			return nil
		}
		return s.checkAccess(u, vhost, broker.Read, "exchange", source)
	}
}

// postBinding creates a binding; the response's Location names it by its
// properties key, as RabbitMQ's does.
func (s *Server) postBinding(kind string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		var body bindingBody
		if err := readJSON(r, &body); err != nil {
			return nil, err
		}
		args, err := tableFromJSON(body.Arguments)
		if err != nil {
			return nil, badRequest("arguments: %s", err)
		}
		source, dest := exchangeName(r.PathValue("source")), r.PathValue("dest")
		m := bindMethod(kind, source, dest, body.RoutingKey, args, true)
		if err := s.checkMethod(m); err != nil {
			return nil, err
		}
		if err := s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error { _, err := do(d, m); return err }); err != nil {
			return nil, err
		}
		bi := broker.BindingInfo{RoutingKey: body.RoutingKey, Arguments: args}
		return location{dest: dest, key: bi.PropertiesKey()}, nil
	}
}

// location is a handler result: 201 Created with a Location header naming
// the new binding relative to the request's path, as RabbitMQ's:
// "<destination>/<properties key>".
type location struct{ dest, key string }

func (s *Server) findBinding(r *http.Request, kind string) (broker.BindingInfo, error) {
	bs, err := s.between(r, kind)
	if err != nil {
		return broker.BindingInfo{}, err
	}
	key, hash, ok := unpackBindingProps(r.PathValue("props"))
	if !ok {
		return broker.BindingInfo{}, notFound()
	}
	for _, bi := range bs {
		if bi.RoutingKey != key {
			continue
		}
		if hash == nil && len(bi.Arguments) == 0 || hash != nil && len(bi.Arguments) > 0 && broker.ArgsHash(bi.Arguments) == *hash {
			return bi, nil
		}
	}
	return broker.BindingInfo{}, notFound()
}

// unpackBindingProps reads a properties key as RabbitMQ's
// unpack_binding_props: split at "~" (a trailing "~" adds nothing), the
// routing key unquoted (%XX, "+" for a space: a key sent unquoted works
// too), then the arguments' hash if there is one. "~" alone is the empty
// key.
func unpackBindingProps(props string) (key string, hash *string, ok bool) {
	if props == "" {
		return "", nil, false
	}
	toks := strings.Split(props, "~")
	if len(toks) > 1 && toks[len(toks)-1] == "" {
		toks = toks[:len(toks)-1]
	}
	if len(toks) > 2 {
		return "", nil, false
	}
	key, err := url.QueryUnescape(toks[0])
	if err != nil {
		return "", nil, false
	}
	if len(toks) == 2 {
		h, err := url.QueryUnescape(toks[1])
		if err != nil {
			return "", nil, false
		}
		hash = &h
	}
	return key, hash, true
}

func (s *Server) getBinding(kind string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		bi, err := s.findBinding(r, kind)
		if err != nil {
			return nil, err
		}
		return bindingJSON(bi), nil
	}
}

func (s *Server) deleteBinding(kind string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		bi, err := s.findBinding(r, kind)
		if err != nil {
			return nil, err
		}
		// The default exchange's implicit bindings go to the channel too,
		// which refuses them as RabbitMQ's does (401 Access refused.).
		m := bindMethod(kind, bi.Source, bi.Destination, bi.RoutingKey, bi.Arguments, false)
		return noContent{}, s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error { _, err := do(d, m); return err })
	}
}

// locationURL escapes as RabbitMQ's Location does: every byte but
// letters, digits and "-._~" as %XX, so a properties key's "%" is %25 and
// its "+" %2B.
func locationURL(l location) string { return escapeSegment(l.dest) + "/" + escapeSegment(l.key) }

func escapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			sb.WriteByte(c)
		default:
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		}
	}
	return sb.String()
}

// deliveryStats adds a queue's or channel's delivery counters to its
// message_stats ms, together once any of them is non-zero, as RabbitMQ
// reports them.
func deliveryStats(ms map[string]any, st broker.QueueMessageStats) {
	if st.DeliverGet()+st.GetEmpty+st.Redeliver+st.Ack == 0 {
		return
	}
	ms["deliver"], ms["deliver_no_ack"] = st.Deliver, st.DeliverNoAck
	ms["get"], ms["get_no_ack"] = st.Get, st.GetNoAck
	ms["deliver_get"], ms["get_empty"] = st.DeliverGet(), st.GetEmpty
	ms["redeliver"], ms["ack"] = st.Redeliver, st.Ack
}
