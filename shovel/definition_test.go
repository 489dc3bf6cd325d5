package shovel_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/brokerd/brokerd/shovel"
)

// TestParseDefinition checks RabbitMQ's validation of the shovel
// parameter: what it accepts with its defaults, and what it refuses with
// its texts.
func TestParseDefinition(t *testing.T) {
	const base = `"src-uri": "amqp://", "dest-uri": "amqp://h/v"`
	for _, tc := range []struct {
		value string
		err   string
		check func(*testing.T, shovel.Definition)
	}{
		{value: `{` + base + `, "src-queue": "q"}`, check: func(t *testing.T, d shovel.Definition) {
			if d.SrcQueue != "q" || d.SrcIsExchange || d.AckMode != "on-confirm" || d.PrefetchCount != 1000 ||
				d.DeleteAfter != "never" || d.ReconnectDelay != 5*time.Second || d.HasDestQueue || d.HasDestExchange {
				t.Fatalf("defaults: %+v", d)
			}
		}},
		{value: `{"src-uri": ["amqp://u:p@a", "amqps://b:5671/%2f?cacertfile=/ca.pem&verify=verify_peer"], "dest-uri": "amqp://",
			"src-exchange": "x", "src-exchange-key": "k.#", "dest-exchange": "y", "dest-exchange-key": "",
			"src-prefetch-count": 10, "ack-mode": "no-ack", "src-delete-after": "queue-length", "reconnect-delay": 0.5,
			"dest-add-forward-headers": true, "dest-add-timestamp-header": true, "src-protocol": "amqp091",
			"dest-publish-properties": {"delivery_mode": 2, "content_type": "x"}, "src-queue-args": {"x-max-length": 10}}`,
			check: func(t *testing.T, d shovel.Definition) {
				if len(d.SrcURIs) != 2 || !d.SrcIsExchange || d.SrcExchangeKey != "k.#" || !d.HasDestExchangeKey ||
					d.DestExchangeKey != "" || d.PrefetchCount != 10 || d.AckMode != "no-ack" || d.DeleteAfter != "queue-length" ||
					d.ReconnectDelay != 500*time.Millisecond || !d.AddForwardHeaders || !d.AddTimestampHeader ||
					d.PublishProperties["delivery_mode"] != 2.0 || d.SrcQueueArgs["x-max-length"] != int64(10) {
					t.Fatalf("parsed: %+v", d)
				}
			}},
		{value: `{` + base + `, "src-queue": "q", "src-delete-after": 7, "reconnect-delay": 0}`, check: func(t *testing.T, d shovel.Definition) {
			if d.DeleteAfter != "" || d.DeleteAfterCount != 7 || d.ReconnectDelay != 0 {
				t.Fatalf("parsed: %+v", d)
			}
		}},
		// Legacy (pre-3.7) names still work, as in RabbitMQ.
		{value: `{` + base + `, "src-queue": "q", "prefetch-count": 3, "delete-after": 2, "add-forward-headers": true}`,
			check: func(t *testing.T, d shovel.Definition) {
				if d.PrefetchCount != 3 || d.DeleteAfterCount != 2 || !d.AddForwardHeaders {
					t.Fatalf("parsed: %+v", d)
				}
			}},
		{value: `{` + base + `}`, err: `Must specify 'src-exchange' or 'src-queue'`},
		{value: `{` + base + `, "src-queue": "q", "src-exchange": "x"}`, err: `Cannot specify 'src-exchange' and 'src-queue'`},
		{value: `{` + base + `, "src-queue": "q", "dest-queue": "q", "dest-exchange": "x"}`, err: `Cannot specify 'dest-exchange' and 'dest-queue'`},
		{value: `{` + base + `, "src-queue": "q", "ack-mode": "no-ack", "src-delete-after": 5}`, err: `Cannot specify 'no-ack' and numerical 'delete-after'`},
		{value: `{"dest-uri": "amqp://", "src-queue": "q"}`, err: `Key "src-uri" not found in shovel`},
		{value: `{"src-uri": "amqp://", "src-queue": "q"}`, err: `Key "dest-uri" not found in shovel`},
		{value: `{` + base + `, "src-queue": "q", "ack-mode": "later"}`,
			err: `ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], actually was <<"later">>`},
		{value: `{` + base + `, "src-queue": "q", "ack-mode": 1}`, err: `ack-mode should be binary, actually was 1`},
		{value: `{` + base + `, "src-queue": "q", "reconnect-delay": "5"}`, err: `reconnect-delay should be a number, actually was <<"5">>`},
		{value: `{` + base + `, "src-queue": "q", "src-prefetch-count": true}`, err: `src-prefetch-count should be a number, actually was true`},
		{value: `{` + base + `, "src-queue": 5}`, err: `src-queue should be binary, actually was 5`},
		{value: `{` + base + `, "src-queue": "q", "dest-add-forward-headers": "yes"}`, err: `dest-add-forward-headers should be boolean, actually was <<"yes">>`},
		{value: `{` + base + `, "src-queue": "q", "src-delete-after": "later"}`,
			err: `src-delete-after should be a number greater than or equal to 0, "never" or "queue-length", actually was <<"later">>`},
		{value: `{` + base + `, "src-queue": "q", "src-delete-after": -1}`,
			err: `src-delete-after should be a number greater than or equal to 0, "never" or "queue-length", actually was -1`},
		{value: `{"src-uri": "http://h", "dest-uri": "amqp://", "src-queue": "q"}`, err: `"http://h" not a valid URI: {unexpected_uri_scheme,"http"}`},
		{value: `{"src-uri": 5, "dest-uri": "amqp://", "src-queue": "q"}`, err: `src-uri should be list, actually was 5`},
		{value: `{` + base + `, "src-queue": "q", "color": "red"}`, err: `Unrecognised terms [{<<"color">>,<<"red">>}] in shovel`},
		{value: `{` + base + `, "src-queue": "q", "dest-publish-properties": {"headers": {}}}`,
			err: `Unrecognised terms [{<<"headers">>,#{}}] in dest-publish-properties`},
		{value: `{` + base + `, "src-queue": "q", "dest-publish-properties": {"priority": "high"}}`, err: `priority should be a number, actually was <<"high">>`},
		{value: `{` + base + `, "src-queue": "q", "src-queue-args": 1}`, err: `src-queue-args not a list 1`},
		{value: `{` + base + `, "src-queue": "q", "src-protocol": "amqp10"}`, err: `src-protocol <<"amqp10">> is not supported: brokerd's shovels speak amqp091 only`},
		{value: `{` + base + `, "src-queue": "q", "dest-protocol": "stomp"}`,
			err: `dest-protocol should be one of [<<"amqp10">>,<<"amqp091">>], actually was <<"stomp">>`},
		{value: `[1]`, err: `shovel definition is not a JSON object: [1]`},
	} {
		d, err := shovel.ParseDefinition(json.RawMessage(tc.value))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s:\n got error %v\nwant %s", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.value, err)
			continue
		}
		if string(d.Raw) != tc.value {
			t.Errorf("Raw %s, want the value", d.Raw)
		}
		tc.check(t, d)
	}
}
