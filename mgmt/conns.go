package mgmt

import (
	"net"
	"net/http"
	"strconv"

	"github.com/brokerd/brokerd/broker"
)

// Connections and channels. A management user sees its own; monitoring
// and administrator users see all (RabbitMQ's rule).

func (s *Server) connRoutes() {
	s.handle("GET /api/connections", management, s.listConnections)
	s.handle("GET /api/vhosts/{vhost}/connections", management, s.listConnections)
	s.handle("GET /api/connections/{name}", management, s.getConnection)
	s.handle("DELETE /api/connections/{name}", management, s.closeConnection)
	s.handle("GET /api/connections/{name}/channels", management, s.connectionChannels)
	s.handle("GET /api/channels", management, s.listChannels)
	s.handle("GET /api/vhosts/{vhost}/channels", management, s.listChannels)
	s.handle("GET /api/channels/{name}", management, s.getChannel)
	s.handle("GET /api/consumers", management, s.listConsumers)
	// {cvhost}: RabbitMQ lists a vhost's consumers (those of the
	// connections the user sees) without asking for permissions there.
	s.handle("GET /api/consumers/{cvhost}", management, s.listConsumers)
}

// seesAll reports whether u sees every user's connections.
func seesAll(u *broker.UserInfo) bool { return hasTag(u, "administrator", "monitoring") }

func hostPort(a net.Addr) (string, int) {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

func (s *Server) connectionJSON(ci broker.ConnectionInfo) map[string]any {
	peerHost, peerPort := hostPort(ci.Peer)
	host, port := hostPort(ci.Local)
	typ := "network"
	if ci.Internal {
		typ = "direct" // RabbitMQ's word for its shovels' connections to their own node
	}
	m := map[string]any{
		"name": ci.Name, "node": s.node(), "type": typ, "state": "running",
		"vhost": ci.VHost, "user": ci.User, "user_who_performed_action": ci.User,
		"protocol": "AMQP 0-9-1", "auth_mechanism": ci.Tuning.Mechanism,
		"host": host, "port": port, "peer_host": peerHost, "peer_port": peerPort,
		"channels": ci.Channels, "channel_max": ci.Tuning.ChannelMax, "frame_max": ci.Tuning.FrameMax,
		"timeout":           int(ci.Tuning.Heartbeat.Seconds()),
		"connected_at":      ci.ConnectedAt.UnixMilli(),
		"client_properties": tableJSON(ci.ClientProperties),
		"ssl":               ci.Tuning.TLS != nil,
	}
	if v, ok := ci.ClientProperties.Get("connection_name"); ok {
		if name, ok := v.(string); ok {
			m["user_provided_name"] = name
		}
	}
	return m
}

func (s *Server) visibleConnections(u *broker.UserInfo, vhost string) []broker.ConnectionInfo {
	var out []broker.ConnectionInfo
	for _, ci := range s.b.Connections(vhost) {
		if seesAll(u) || ci.User == u.Name {
			out = append(out, ci)
		}
	}
	return out
}

func (s *Server) listConnections(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, ci := range s.visibleConnections(u, r.PathValue("vhost")) {
		m := s.connectionJSON(ci)
		s.connRates(m, ci, rateQueryOf(r))
		out = append(out, m)
	}
	return out, nil
}

func (s *Server) connectionFor(u *broker.UserInfo, name string) (broker.ConnectionInfo, error) {
	ci, err := s.b.Connection(name)
	if err != nil {
		return ci, err
	}
	if !seesAll(u) && ci.User != u.Name {
		return ci, notAuthorised("User not authorised to access object")
	}
	return ci, nil
}

func (s *Server) getConnection(u *broker.UserInfo, r *http.Request) (any, error) {
	ci, err := s.connectionFor(u, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	m := s.connectionJSON(ci)
	s.connRates(m, ci, rateQueryOf(r))
	return m, nil
}

// closeConnection closes a connection with 320 CONNECTION_FORCED; the
// X-Reason header gives the text, as in RabbitMQ.
func (s *Server) closeConnection(u *broker.UserInfo, r *http.Request) (any, error) {
	ci, err := s.connectionFor(u, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	if !hasTag(u, "administrator") && ci.User != u.Name {
		return nil, notAuthorised("User not authorised to access object")
	}
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = "Closed via management plugin"
	}
	if err := s.b.CloseConnection(ci.Name, reason); err != nil {
		return nil, err
	}
	s.log.Info("connection closed through the management API", "connection", ci.Name, "by", u.Name, "reason", reason)
	return noContent{}, nil
}

func (s *Server) channelJSON(ch broker.ChannelInfo, conns map[string]broker.ConnectionInfo) map[string]any {
	cd := map[string]any{"name": ch.Connection}
	if ci, ok := conns[ch.Connection]; ok {
		cd["peer_host"], cd["peer_port"] = hostPort(ci.Peer)
	}
	state := "running"
	if !ch.Flow {
		state = "flow"
	}
	return map[string]any{
		"name": ch.Name, "number": ch.Number, "node": s.node(), "vhost": ch.VHost, "user": ch.User,
		"user_who_performed_action": ch.User, "state": state, "connection_details": cd,
		"consumer_count": ch.Consumers, "messages_unacknowledged": ch.Unacked,
		"prefetch_count": ch.Prefetch, "global_prefetch_count": ch.GlobalPrefetch,
		"confirm": ch.Confirm, "transactional": ch.Tx,
		"messages_uncommitted": ch.Uncommitted, "acks_uncommitted": ch.AcksUncommitted,
	}
}

func (s *Server) channels(u *broker.UserInfo, r *http.Request, vhost string, keep func(broker.ChannelInfo) bool) []map[string]any {
	conns := map[string]broker.ConnectionInfo{}
	for _, ci := range s.visibleConnections(u, vhost) {
		conns[ci.Name] = ci
	}
	out := []map[string]any{}
	for _, ch := range s.b.Channels(vhost) {
		if _, visible := conns[ch.Connection]; visible && keep(ch) {
			m := s.channelJSON(ch, conns)
			s.channelRates(m, ch, rateQueryOf(r))
			out = append(out, m)
		}
	}
	return out
}

func (s *Server) listChannels(u *broker.UserInfo, r *http.Request) (any, error) {
	return s.channels(u, r, r.PathValue("vhost"), func(broker.ChannelInfo) bool { return true }), nil
}

func (s *Server) connectionChannels(u *broker.UserInfo, r *http.Request) (any, error) {
	ci, err := s.connectionFor(u, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	return s.channels(u, r, ci.VHost, func(ch broker.ChannelInfo) bool { return ch.Connection == ci.Name }), nil
}

func (s *Server) getChannel(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	out := s.channels(u, r, "", func(ch broker.ChannelInfo) bool { return ch.Name == name })
	if len(out) == 0 {
		return nil, notFound()
	}
	details := []map[string]any{}
	for _, c := range s.b.Consumers(out[0]["vhost"].(string)) {
		if c.Channel == name {
			details = append(details, consumerJSON(c))
		}
	}
	out[0]["consumer_details"] = details
	return out[0], nil
}

func consumerJSON(c broker.ConsumerInfo) map[string]any {
	return map[string]any{
		"consumer_tag": c.Tag, "ack_required": !c.NoAck, "exclusive": c.Exclusive, "active": true, "activity_status": "up",
		"prefetch_count": c.Prefetch, "arguments": map[string]any{},
		"channel_details": map[string]any{"name": c.Channel},
		"queue":           map[string]any{"name": c.Queue, "vhost": c.VHost},
	}
}

func (s *Server) listConsumers(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost := r.PathValue("cvhost")
	if vhost != "" && s.b.VHost(vhost) == nil {
		return nil, notFound()
	}
	visible := map[string]bool{}
	for _, ch := range s.channels(u, r, vhost, func(broker.ChannelInfo) bool { return true }) {
		visible[ch["name"].(string)] = true
	}
	out := []map[string]any{}
	for _, c := range s.b.Consumers(vhost) {
		if !visible[c.Channel] {
			continue
		}
		out = append(out, consumerJSON(c))
	}
	return out, nil
}
