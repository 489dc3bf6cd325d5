package shovel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Ack modes (Definition.AckMode).
const (
	OnConfirm = "on-confirm"
	OnPublish = "on-publish"
	NoAck     = "no-ack"
)

// Definition is one dynamic shovel: the value of RabbitMQ's `shovel`
// runtime parameter, validated and with its defaults applied
// (ParseDefinition). Raw is the JSON it was parsed from, for export. A
// Definition is a value: the engine never changes it.
type Definition struct {
	Raw json.RawMessage

	SrcURIs, DestURIs []string
	// SrcExchange is set (SrcIsExchange) or SrcQueue is.
	SrcIsExchange  bool
	SrcQueue       string
	SrcExchange    string
	SrcExchangeKey string
	// SrcQueueArgs are the arguments of the source queue's declaration,
	// when the shovel declares it (it does not exist). Nil: none.
	SrcQueueArgs    amqp091.Table
	SrcConsumerArgs amqp091.Table
	SrcConsumerName string
	// SrcPredeclared, DestPredeclared: the queue must exist (a passive
	// declaration checks it); the shovel never declares it.
	SrcPredeclared, DestPredeclared bool

	// DestQueue or DestExchange is set, or neither (HasDestQueue,
	// HasDestExchange): neither publishes to the source delivery's
	// exchange with its routing key, as RabbitMQ does.
	HasDestQueue, HasDestExchange bool
	DestQueue                     string
	DestExchange                  string
	// DestExchangeKey replaces the routing key when HasDestExchangeKey.
	HasDestExchangeKey bool
	DestExchangeKey    string
	DestQueueArgs      amqp091.Table

	// PrefetchCount is src-prefetch-count (default 1000; 0: unlimited).
	PrefetchCount int
	AckMode       string // OnConfirm (default), OnPublish or NoAck
	// DeleteAfter is "never" (default), "queue-length" or "" with
	// DeleteAfterCount messages.
	DeleteAfter      string
	DeleteAfterCount uint64
	// ReconnectDelay is reconnect-delay (default 5s); 0: a failure
	// terminates the shovel.
	ReconnectDelay     time.Duration
	AddForwardHeaders  bool
	AddTimestampHeader bool
	// PublishProperties are dest-publish-properties, by RabbitMQ's
	// property names (content_type ...): strings, or float64 for
	// delivery_mode, priority and timestamp.
	PublishProperties map[string]any
}

// DefaultPrefetchCount, DefaultReconnectDelay are RabbitMQ's defaults.
const (
	DefaultPrefetchCount  = 1000
	DefaultReconnectDelay = 5 * time.Second
)

type validator func(key string, v any) error

// keys are the keys RabbitMQ's amqp091 shovel accepts (3.x and 4.x
// legacy names included) with their checks; anything else is refused.
var keys = map[string]validator{
	"internal":                  vBool,
	"internal_owner":            vObject,
	"reconnect-delay":           vNumber,
	"ack-mode":                  vEnum("no-ack", "on-publish", "on-confirm"),
	"src-protocol":              vEnum("amqp10", "amqp091"),
	"dest-protocol":             vEnum("amqp10", "amqp091"),
	"src-uri":                   vURIs,
	"src-exchange":              vBinary,
	"src-exchange-key":          vBinary,
	"src-queue":                 vBinary,
	"src-queue-args":            vObject,
	"src-consumer-args":         vObject,
	"src-consumer-name":         vBinary,
	"prefetch-count":            vNumber,
	"src-prefetch-count":        vNumber,
	"delete-after":              vDeleteAfter,
	"src-delete-after":          vDeleteAfter,
	"src-predeclared":           vBool,
	"dest-uri":                  vURIs,
	"dest-exchange":             vBinary,
	"dest-exchange-key":         vBinary,
	"dest-queue":                vQueueName,
	"dest-queue-args":           vObject,
	"add-forward-headers":       vBool,
	"add-timestamp-header":      vBool,
	"dest-add-forward-headers":  vBool,
	"dest-add-timestamp-header": vBool,
	"publish-properties":        vProperties,
	"dest-publish-properties":   vProperties,
	"dest-predeclared":          vBool,
}

// ParseDefinition validates a parameter value as RabbitMQ's
// rabbit_shovel_parameters does; the error's text is what the API's 400
// says, RabbitMQ's words (with Erlang's rendering of terms, <<"x">>) where
// it has them. The first failure is reported.
func ParseDefinition(value json.RawMessage) (Definition, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return Definition{}, fmt.Errorf("shovel definition is not a JSON object: %s", strings.TrimSpace(string(value)))
	}
	if v, ok := m["src-exchange"]; ok {
		if _, q := m["src-queue"]; q {
			return Definition{}, fmt.Errorf("Cannot specify 'src-exchange' and 'src-queue'")
		}
		_ = v
	} else if _, q := m["src-queue"]; !q {
		return Definition{}, fmt.Errorf("Must specify 'src-exchange' or 'src-queue'")
	}
	da, hasDA := m["src-delete-after"]
	if !hasDA {
		da, hasDA = m["delete-after"]
	}
	if hasDA {
		if _, isNum := da.(json.Number); isNum && m["ack-mode"] == "no-ack" {
			return Definition{}, fmt.Errorf("Cannot specify 'no-ack' and numerical 'delete-after'")
		}
	}
	_, dq := m["dest-queue"]
	_, dx := m["dest-exchange"]
	if dq && dx {
		return Definition{}, fmt.Errorf("Cannot specify 'dest-exchange' and 'dest-queue'")
	}
	var unknown []string
	for _, k := range sortedKeys(m) {
		if keys[k] == nil {
			unknown = append(unknown, fmt.Sprintf("{%s,%s}", erl(k), erl(m[k])))
		}
	}
	for _, k := range []string{"src-uri", "dest-uri"} {
		if _, ok := m[k]; !ok {
			return Definition{}, fmt.Errorf("Key \"%s\" not found in shovel", k)
		}
	}
	for _, k := range sortedKeys(m) {
		if f := keys[k]; f != nil {
			if err := f(k, m[k]); err != nil {
				return Definition{}, err
			}
		}
	}
	if len(unknown) > 0 {
		return Definition{}, fmt.Errorf("Unrecognised terms [%s] in shovel", strings.Join(unknown, ","))
	}
	for _, k := range []string{"src-protocol", "dest-protocol"} {
		if p, ok := m[k]; ok && p != "amqp091" {
			return Definition{}, fmt.Errorf("%s %s is not supported: brokerd's shovels speak amqp091 only", k, erl(p))
		}
	}

	d := Definition{
		Raw:            append(json.RawMessage(nil), value...),
		SrcURIs:        uris(m["src-uri"]),
		DestURIs:       uris(m["dest-uri"]),
		PrefetchCount:  DefaultPrefetchCount,
		AckMode:        OnConfirm,
		DeleteAfter:    "never",
		ReconnectDelay: DefaultReconnectDelay,
	}
	if v, ok := m["src-queue"]; ok {
		d.SrcQueue = v.(string)
	} else {
		d.SrcIsExchange = true
		d.SrcExchange = m["src-exchange"].(string)
		if k, ok := m["src-exchange-key"]; ok {
			d.SrcExchangeKey = k.(string)
		}
	}
	d.SrcQueueArgs = table(m["src-queue-args"])
	d.SrcConsumerArgs = table(m["src-consumer-args"])
	d.DestQueueArgs = table(m["dest-queue-args"])
	if v, ok := m["src-consumer-name"]; ok {
		d.SrcConsumerName = v.(string)
	}
	d.SrcPredeclared, _ = m["src-predeclared"].(bool)
	d.DestPredeclared, _ = m["dest-predeclared"].(bool)
	if v, ok := m["dest-queue"]; ok {
		d.HasDestQueue, d.DestQueue = true, v.(string)
	}
	if v, ok := m["dest-exchange"]; ok {
		d.HasDestExchange, d.DestExchange = true, v.(string)
	}
	if v, ok := m["dest-exchange-key"]; ok {
		d.HasDestExchangeKey, d.DestExchangeKey = true, v.(string)
	}
	for _, k := range []string{"prefetch-count", "src-prefetch-count"} { // the new name wins
		if v, ok := m[k]; ok {
			n, err := strconv.ParseUint(v.(json.Number).String(), 10, 16)
			if err != nil {
				return Definition{}, fmt.Errorf("%s should be a non-negative integer up to 65535, actually was %s", k, erl(v))
			}
			d.PrefetchCount = int(n)
		}
	}
	if v, ok := m["ack-mode"]; ok {
		d.AckMode = v.(string)
	}
	if hasDA {
		switch v := da.(type) {
		case string:
			d.DeleteAfter = v
		case json.Number:
			n, _ := strconv.ParseUint(v.String(), 10, 64) // vDeleteAfter checked it
			d.DeleteAfter, d.DeleteAfterCount = "", n
		}
	}
	if v, ok := m["reconnect-delay"]; ok {
		f, _ := v.(json.Number).Float64()
		if f < 0 || f > math.MaxInt64/float64(time.Second) {
			return Definition{}, fmt.Errorf("reconnect-delay should be a number of seconds from 0, actually was %s", erl(v))
		}
		d.ReconnectDelay = time.Duration(f * float64(time.Second))
	}
	for _, k := range []string{"add-forward-headers", "dest-add-forward-headers"} {
		if v, ok := m[k]; ok {
			d.AddForwardHeaders = v.(bool)
		}
	}
	for _, k := range []string{"add-timestamp-header", "dest-add-timestamp-header"} {
		if v, ok := m[k]; ok {
			d.AddTimestampHeader = v.(bool)
		}
	}
	for _, k := range []string{"publish-properties", "dest-publish-properties"} {
		if v, ok := m[k]; ok {
			d.PublishProperties = map[string]any{}
			for pk, pv := range v.(map[string]any) {
				if n, ok := pv.(json.Number); ok {
					f, _ := n.Float64()
					pv = f
				}
				d.PublishProperties[pk] = pv
			}
		}
	}
	return d, nil
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func uris(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	var out []string
	for _, u := range v.([]any) {
		out = append(out, u.(string))
	}
	return out
}

// table converts a JSON object to an AMQP table: integers become int64,
// other numbers float64, objects tables, arrays arrays.
func table(v any) amqp091.Table {
	o, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	t := amqp091.Table{}
	for k, x := range o {
		t[k] = tableValue(x)
	}
	return t
}

func tableValue(x any) any {
	switch x := x.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		return table(x)
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = tableValue(e)
		}
		return a
	}
	return x // string, bool, nil
}

// erl renders a JSON value as Erlang's ~tp renders the term RabbitMQ
// decodes it to, for error texts: "x" is <<"x">>, null is null.
func erl(v any) string {
	switch v := v.(type) {
	case string:
		return `<<"` + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `"`, `\"`) + `">>`
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = erl(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range sortedKeys(v) {
			parts = append(parts, erl(k)+" => "+erl(v[k]))
		}
		return "#{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprint(v)
}

func vBool(k string, v any) error {
	if _, ok := v.(bool); !ok {
		return fmt.Errorf("%s should be boolean, actually was %s", k, erl(v))
	}
	return nil
}

func vNumber(k string, v any) error {
	if _, ok := v.(json.Number); !ok {
		return fmt.Errorf("%s should be a number, actually was %s", k, erl(v))
	}
	return nil
}

func vBinary(k string, v any) error {
	if _, ok := v.(string); !ok {
		return fmt.Errorf("%s should be binary, actually was %s", k, erl(v))
	}
	return nil
}

func vQueueName(k string, v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s should be binary, actually was %s", k, erl(v))
	}
	if len(s) > 255 {
		return fmt.Errorf("%s should be less than 255 bytes, actually was %d", k, len(s))
	}
	return nil
}

func vObject(k string, v any) error {
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("%s not a list %s", k, erl(v))
	}
	return nil
}

func vEnum(opts ...string) validator {
	return func(k string, v any) error {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s should be binary, actually was %s", k, erl(v))
		}
		if !slices.Contains(opts, s) {
			os := make([]any, len(opts))
			for i, o := range opts {
				os[i] = o
			}
			return fmt.Errorf("%s should be one of %s, actually was %s", k, erl(os), erl(v))
		}
		return nil
	}
}

func vDeleteAfter(k string, v any) error {
	switch x := v.(type) {
	case string:
		if x == "never" || x == "queue-length" {
			return nil
		}
	case json.Number:
		if _, err := strconv.ParseUint(x.String(), 10, 64); err == nil {
			return nil
		}
	}
	return fmt.Errorf(`%s should be a number greater than or equal to 0, "never" or "queue-length", actually was %s`, k, erl(v))
}

func vURIs(k string, v any) error {
	switch x := v.(type) {
	case string:
		return checkURI(x)
	case []any:
		if len(x) == 0 {
			return fmt.Errorf("%s should be a non-empty list of URIs, actually was []", k)
		}
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("%s should be binary, actually was %s", k, erl(e))
			}
			if err := checkURI(s); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s should be list, actually was %s", k, erl(v))
}

func checkURI(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q not a valid URI: %s", s, strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(s)+": "))
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return fmt.Errorf("%q not a valid URI: {unexpected_uri_scheme,%q}", s, u.Scheme)
	}
	if u.Host == "" && u.Scheme == "amqps" {
		return fmt.Errorf("%q not a valid URI: amqps needs a host", s)
	}
	if u.Host != "" {
		if _, err := amqp091.ParseURI(s); err != nil {
			return fmt.Errorf("%q not a valid URI: %s", s, err)
		}
	}
	return nil
}

var propertyKinds = map[string]bool{ // true: a number
	"content_type": false, "content_encoding": false, "delivery_mode": true, "priority": true,
	"correlation_id": false, "reply_to": false, "expiration": false, "message_id": false,
	"timestamp": true, "type": false, "user_id": false, "app_id": false, "cluster_id": false,
}

func vProperties(k string, v any) error {
	o, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s not a list %s", k, erl(v))
	}
	var unknown []string
	for _, pk := range sortedKeys(o) {
		num, known := propertyKinds[pk]
		if !known {
			unknown = append(unknown, fmt.Sprintf("{%s,%s}", erl(pk), erl(o[pk])))
			continue
		}
		if num {
			n, ok := o[pk].(json.Number)
			if !ok {
				return fmt.Errorf("%s should be a number, actually was %s", pk, erl(o[pk]))
			}
			if _, err := strconv.ParseUint(n.String(), 10, 64); err != nil || (pk != "timestamp" && mustUint8(n) < 0) {
				return fmt.Errorf("%s should be a non-negative integer (up to 255 for %s), actually was %s", pk, pk, n)
			}
		} else if err := vBinary(pk, o[pk]); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("Unrecognised terms [%s] in %s", strings.Join(unknown, ","), k)
	}
	return nil
}

func mustUint8(n json.Number) int {
	x, err := strconv.ParseUint(n.String(), 10, 8)
	if err != nil {
		return -1
	}
	return int(x)
}
