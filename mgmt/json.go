package mgmt

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/brokerd/brokerd/amqp"
)

// AMQP field tables in JSON, as RabbitMQ's management plugin writes and
// reads them (rabbit_mgmt_format:amqp_table/1, args/1).

// tableJSON renders a field table as a JSON object; a nil table as {}.
// Keys repeated in the table keep their first value, as lookups do.
func tableJSON(t amqp.Table) map[string]any {
	out := make(map[string]any, len(t))
	for _, f := range t {
		if _, dup := out[f.Key]; !dup {
			out[f.Key] = valueJSON(f.Value)
		}
	}
	return out
}

// valueJSON renders a field value as RabbitMQ 3.10's amqp_value does:
// strings and byte arrays as text when they are UTF-8, otherwise as "Not
// UTF-8, base64 is: " and their base64 in 76-character lines; void as
// "undefined"; a decimal as its scale, ".", its value (RabbitMQ's
// rendering: scale 2, value 12345 is 2.12345).
func valueJSON(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return tableJSON(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = valueJSON(e)
		}
		return out
	case []byte:
		return utf8Safe(x)
	case string:
		return utf8Safe([]byte(x))
	case amqp.Timestamp:
		return uint64(x)
	case amqp.Decimal:
		if x.Value >= 0 {
			if f, err := strconv.ParseFloat(fmt.Sprintf("%d.%d", x.Scale, x.Value), 64); err == nil {
				return f
			}
		}
		return float64(x.Value) / math.Pow10(int(x.Scale)) // RabbitMQ fails on these
	case float32:
		return float64(x)
	case nil:
		return "undefined"
	}
	return v
}

// utf8Safe is RabbitMQ's rabbit_mgmt_format:utf8_safe.
func utf8Safe(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	enc := base64.StdEncoding.EncodeToString(b)
	var sb strings.Builder
	sb.WriteString("Not UTF-8, base64 is: ")
	for len(enc) > 76 {
		sb.WriteString(enc[:76])
		sb.WriteByte('\n')
		enc = enc[76:]
	}
	sb.WriteString(enc)
	return sb.String()
}

// tableFromJSON converts a JSON object's fields (decoded with UseNumber)
// to an AMQP table, as RabbitMQ types them: integers as long, other
// numbers as double, strings as longstr, objects as tables, arrays as
// arrays. Fields come out in key order (JSON objects have none).
func tableFromJSON(m map[string]any) (amqp.Table, error) {
	keys := sortedKeys(m)
	t := make(amqp.Table, 0, len(keys))
	for _, k := range keys {
		v, err := valueFromJSON(m[k])
		if err != nil {
			return nil, fmt.Errorf("argument '%s': %w", k, err)
		}
		t = append(t, amqp.Field{Key: k, Value: v})
	}
	return t, nil
}

func valueFromJSON(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("bad number %s", x)
		}
		return f, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return x, nil
	case string, bool, nil:
		return x, nil
	case map[string]any:
		return tableFromJSON(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = valueFromJSON(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported JSON value %T", v)
}

// propertiesJSON renders basic properties as RabbitMQ's /get does: only
// the properties present, headers as a table.
func propertiesJSON(p amqp.Properties) map[string]any {
	out := map[string]any{}
	f := p.Flags
	str := func(flag uint16, key, v string) {
		if f&flag != 0 {
			out[key] = v
		}
	}
	str(amqp.FlagContentType, "content_type", p.ContentType)
	str(amqp.FlagContentEncoding, "content_encoding", p.ContentEncoding)
	if f&amqp.FlagHeaders != 0 {
		out["headers"] = tableJSON(p.Headers)
	}
	if f&amqp.FlagDeliveryMode != 0 {
		out["delivery_mode"] = p.DeliveryMode
	}
	if f&amqp.FlagPriority != 0 {
		out["priority"] = p.Priority
	}
	str(amqp.FlagCorrelationID, "correlation_id", p.CorrelationID)
	str(amqp.FlagReplyTo, "reply_to", p.ReplyTo)
	str(amqp.FlagExpiration, "expiration", p.Expiration)
	str(amqp.FlagMessageID, "message_id", p.MessageID)
	if f&amqp.FlagTimestamp != 0 {
		out["timestamp"] = p.Timestamp
	}
	str(amqp.FlagType, "type", p.Type)
	str(amqp.FlagUserID, "user_id", p.UserID)
	str(amqp.FlagAppID, "app_id", p.AppID)
	str(amqp.FlagClusterID, "cluster_id", p.ClusterID)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
