package mgmt

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// POST /api/exchanges/{vhost}/{name}/publish publishes one message as the
// user (write permission on the exchange), as RabbitMQ's: the body is
// {"properties", "routing_key", "payload", "payload_encoding"} and the
// answer {"routed": bool}. No confirm: the message is in its queues when
// the answer comes, not necessarily on disk.

type publishBody struct {
	Properties      map[string]any `json:"properties"`
	RoutingKey      *string        `json:"routing_key"`
	Payload         *string        `json:"payload"`
	PayloadEncoding string         `json:"payload_encoding"`
}

func (s *Server) publish(u *broker.UserInfo, r *http.Request) (any, error) {
	var body publishBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range []struct {
		key     string
		missing bool
	}{{"properties", body.Properties == nil}, {"routing_key", body.RoutingKey == nil}, {"payload", body.Payload == nil}, {"payload_encoding", body.PayloadEncoding == ""}} {
		if f.missing {
			missing = append(missing, "{key_missing,"+f.key+"}")
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("[%s]", strings.Join(missing, ","))
	}
	payload := []byte(*body.Payload)
	switch body.PayloadEncoding {
	case "string":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(*body.Payload)
		if err != nil {
			return nil, badRequest("payload is not base64: %s", err)
		}
		payload = b
	default:
		return nil, badRequest("payload_encoding must be string or base64")
	}
	props, err := propertiesFromJSON(body.Properties)
	if err != nil {
		return nil, badRequest("%s", err)
	}
	d, err := s.b.OpenDirect(u.Name, r.PathValue("vhost"))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	routed, aerr := d.Publish(exchangeName(r.PathValue("name")), *body.RoutingKey, props, payload)
	if aerr != nil {
		return nil, aerr
	}
	return map[string]any{"routed": routed}, nil
}

// propertiesFromJSON is propertiesJSON's inverse.
func propertiesFromJSON(m map[string]any) (amqp.Properties, error) {
	var p amqp.Properties
	for k, v := range m {
		str := func(flag uint16, dst *string) error {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("property %s must be a string", k)
			}
			*dst, p.Flags = s, p.Flags|flag
			return nil
		}
		num := func(flag uint16, limit int64) (int64, error) {
			n, err := valueFromJSON(v)
			i, ok := n.(int64)
			if err != nil || !ok || i < 0 || i > limit {
				return 0, fmt.Errorf("property %s must be an integer 0..%d", k, limit)
			}
			p.Flags |= flag
			return i, nil
		}
		var err error
		switch k {
		case "content_type":
			err = str(amqp.FlagContentType, &p.ContentType)
		case "content_encoding":
			err = str(amqp.FlagContentEncoding, &p.ContentEncoding)
		case "headers":
			h, ok := v.(map[string]any)
			if !ok {
				return p, fmt.Errorf("property headers must be an object")
			}
			if p.Headers, err = tableFromJSON(h); err == nil {
				p.Flags |= amqp.FlagHeaders
			}
		case "delivery_mode":
			var n int64
			n, err = num(amqp.FlagDeliveryMode, 2)
			p.DeliveryMode = uint8(n)
		case "priority":
			var n int64
			n, err = num(amqp.FlagPriority, 255)
			p.Priority = uint8(n)
		case "correlation_id":
			err = str(amqp.FlagCorrelationID, &p.CorrelationID)
		case "reply_to":
			err = str(amqp.FlagReplyTo, &p.ReplyTo)
		case "expiration":
			err = str(amqp.FlagExpiration, &p.Expiration)
		case "message_id":
			err = str(amqp.FlagMessageID, &p.MessageID)
		case "timestamp":
			var n int64
			n, err = num(amqp.FlagTimestamp, 1<<62)
			p.Timestamp = uint64(n)
		case "type":
			err = str(amqp.FlagType, &p.Type)
		case "user_id":
			err = str(amqp.FlagUserID, &p.UserID)
		case "app_id":
			err = str(amqp.FlagAppID, &p.AppID)
		case "cluster_id":
			err = str(amqp.FlagClusterID, &p.ClusterID)
		default:
			return p, fmt.Errorf("unknown property %s", k)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}
