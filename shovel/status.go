package shovel

// Status is one row of /api/shovels (RabbitMQ's fields, JSON-tagged as
// RabbitMQ names them).
type Status struct {
	Node      string `json:"node"`
	Timestamp string `json:"timestamp"` // "2026-11-28 17:30:00", local time, when the state was entered
	Name      string `json:"name"`
	Vhost     string `json:"vhost"`
	Type      string `json:"type"`             // "dynamic"
	State     string `json:"state"`            // "starting" | "running" | "terminated"
	Reason    string `json:"reason,omitempty"` // why terminated / why the last connect failed
	// BlockedStatus is "running" or "blocked" (the destination sent
	// connection.blocked), for running shovels only.
	BlockedStatus   string `json:"blocked_status,omitempty"`
	SrcURI          string `json:"src_uri"`  // the URI in use, password removed
	DestURI         string `json:"dest_uri"` // the URI in use, password removed
	SrcProtocol     string `json:"src_protocol"`
	DestProtocol    string `json:"dest_protocol"`
	SrcQueue        string `json:"src_queue,omitempty"`
	SrcExchange     string `json:"src_exchange,omitempty"`
	SrcExchangeKey  string `json:"src_exchange_key,omitempty"`
	DestQueue       string `json:"dest_queue,omitempty"`
	DestExchange    string `json:"dest_exchange,omitempty"`
	DestExchangeKey string `json:"dest_exchange_key,omitempty"`
	// Forwarded counts the messages settled on the destination: confirmed
	// (on-confirm) or published (on-publish, no-ack). brokerd's addition.
	Forwarded uint64 `json:"messages_forwarded"`
}

// States.
const (
	StateStarting   = "starting"
	StateRunning    = "running"
	StateTerminated = "terminated"
)

// timestampLayout is RabbitMQ's rendering of a status timestamp.
const timestampLayout = "2006-01-02 15:04:05"
