package ctl

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of the connection options.
const (
	DefaultURL      = "http://127.0.0.1:15672"
	DefaultPort     = "15672"
	DefaultUser     = "guest"
	DefaultPassword = "guest"
	DefaultVhost    = "/"
	DefaultTimeout  = 60 * time.Second
)

// Environment variables read when the matching flag is absent.
const (
	EnvURL      = "BROKERCTL_URL"
	EnvUsername = "BROKERCTL_USERNAME"
	EnvPassword = "BROKERCTL_PASSWORD"
)

// options is a parsed command line.
type options struct {
	verb string
	args []string // positional arguments after the verb

	url, node          string
	username, password string
	userSet, passSet   bool
	vhost              string
	vhostSet           bool // -p given: export/import use the vhost's endpoint
	quiet, silent      bool
	noHeaders          bool
	json               bool
	timeout            time.Duration
	help               bool
	version            bool // -version: print brokerctl's version, do nothing else

	// Verb options; given tells which appeared, for the check that the
	// verb takes them.
	given       []string // canonical long names of verb options seen
	priority    int
	applyTo     string
	ifEmpty     bool
	ifUnused    bool
	description string
	tags        string
	queueType   string
	count       int               // peek: messages to show
	from        uint64            // peek: first seq
	peekPrio    *int              // peek: the priority level from starts on
	toOrigin    bool              // redrive
	exchange    *string           // redrive: target exchange
	routingKey  *string           // redrive
	max         int               // redrive: most messages (0: all)
	reason      string            // redrive: latest death's reason filter
	rate        float64           // redrive: most messages a second (0: unpaced)
	sourceQueue string            // redrive: latest death's queue filter
	minAge      time.Duration     // redrive: latest death at least this old
	detach      bool              // redrive: start the task and return
	unit        string            // status: byte multiple ("" is gb)
	ids         []uint64          // cancel_scheduled: --id, repeatable
	headers     map[string]string // cancel_scheduled: --header NAME=VALUE, repeatable
	dueBefore   string            // cancel_scheduled
	dueAfter    string            // cancel_scheduled
	all         bool              // cancel_scheduled
	timeoutSet  bool              // -t given (await_startup's default is longer)
	global      bool              // close_all_connections: every vhost's
	limit       int               // close_all_connections: most connections (0: all)
	connDelay   time.Duration     // close_all_connections: pause between two
	within      *int              // check_certificate_expiration: the period (nil: 4)
	diagnostics bool              // "brokerctl diagnostics VERB": rabbitmq-diagnostics' verbs
	// list_vhost_limits, list_user_limits (tenancy.go)
	limitsGlobal bool
	limitsUser   string
}

// optSpec describes one option. Verb options name the verbs that take
// them; the others apply to every verb.
type optSpec struct {
	long, short string
	value       bool
	verbs       []string
	set         func(o *options, v string) error
}

var policyVerbs = []string{"set_policy", "set_operator_policy"}

var optSpecs = []optSpec{
	{long: "url", value: true, set: func(o *options, v string) error { o.url = v; return nil }},
	{long: "node", short: "n", value: true, set: func(o *options, v string) error { o.node = v; return nil }},
	{long: "username", short: "u", value: true, set: func(o *options, v string) error { o.username, o.userSet = v, true; return nil }},
	{long: "password", value: true, set: func(o *options, v string) error { o.password, o.passSet = v, true; return nil }},
	{long: "vhost", short: "p", value: true, set: func(o *options, v string) error { o.vhost, o.vhostSet = v, true; return nil }},
	{long: "quiet", short: "q", set: func(o *options, _ string) error { o.quiet = true; return nil }},
	{long: "silent", short: "s", set: func(o *options, _ string) error { o.silent = true; return nil }},
	{long: "no-table-headers", set: func(o *options, _ string) error { o.noHeaders = true; return nil }},
	{long: "formatter", value: true, set: setFormatter},
	{long: "timeout", short: "t", value: true, set: setTimeout},
	{long: "help", short: "?", set: func(o *options, _ string) error { o.help = true; return nil }},
	// -version as brokerd spells it, --version as rabbitmqctl does.
	{long: "version", short: "version", set: func(o *options, _ string) error { o.version = true; return nil }},
	// rabbitmqctl's Erlang distribution option: meaningless over HTTP,
	// accepted so that scripts need no change.
	{long: "longnames", short: "l", set: func(*options, string) error { return nil }},

	{long: "priority", value: true, verbs: policyVerbs, set: setPriority},
	{long: "apply-to", value: true, verbs: policyVerbs, set: func(o *options, v string) error { o.applyTo = v; return nil }},
	{long: "if-empty", short: "e", verbs: []string{"delete_queue"}, set: func(o *options, _ string) error { o.ifEmpty = true; return nil }},
	{long: "if-unused", short: "u", verbs: []string{"delete_queue"}, set: func(o *options, _ string) error { o.ifUnused = true; return nil }},
	{long: "description", value: true, verbs: []string{"add_vhost"}, set: func(o *options, v string) error { o.description = v; return nil }},
	{long: "tags", value: true, verbs: []string{"add_vhost"}, set: func(o *options, v string) error { o.tags = v; return nil }},
	{long: "default-queue-type", value: true, verbs: []string{"add_vhost"}, set: func(o *options, v string) error { o.queueType = v; return nil }},
	{long: "count", value: true, verbs: []string{"peek", "list_scheduled"}, set: func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return fmt.Errorf("--count %q: want 1..1000", v)
		}
		o.count = n
		return nil
	}},
	{long: "from", value: true, verbs: []string{"peek"}, set: func(o *options, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("--from %q: want a message sequence number", v)
		}
		o.from = n
		return nil
	}},
	{long: "priority", value: true, verbs: []string{"peek"}, set: func(o *options, v string) error {
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			return fmt.Errorf("--priority %q: want a priority level, 0 to 255", v)
		}
		p := int(n)
		o.peekPrio = &p
		return nil
	}},
	{long: "global", verbs: []string{"close_all_connections"}, set: func(o *options, _ string) error { o.global = true; return nil }},
	{long: "limit", value: true, verbs: []string{"close_all_connections"}, set: func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--limit %q: want a count of connections, at least 1", v)
		}
		o.limit = n
		return nil
	}},
	{long: "per-connection-delay", value: true, verbs: []string{"close_all_connections"}, set: func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("--per-connection-delay %q: want milliseconds", v)
		}
		o.connDelay = time.Duration(n) * time.Millisecond
		return nil
	}},
	{long: "to-origin", verbs: []string{"redrive"}, set: func(o *options, _ string) error { o.toOrigin = true; return nil }},
	{long: "exchange", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error { o.exchange = &v; return nil }},
	{long: "routing-key", value: true, verbs: []string{"redrive", "cancel_scheduled"}, set: func(o *options, v string) error { o.routingKey = &v; return nil }},
	{long: "reason", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error { o.reason = v; return nil }},
	{long: "source-queue", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error { o.sourceQueue = v; return nil }},
	{long: "min-age", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("--min-age %q: want a positive duration such as 90s or 2h", v)
		}
		o.minAge = d
		return nil
	}},
	{long: "id", value: true, verbs: []string{"cancel_scheduled"}, set: func(o *options, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("--id %q: want a scheduled message's id (list_scheduled's id column)", v)
		}
		o.ids = append(o.ids, n)
		return nil
	}},
	{long: "header", value: true, verbs: []string{"cancel_scheduled"}, set: parseHeaderOpt},
	{long: "due-before", value: true, verbs: []string{"cancel_scheduled"}, set: func(o *options, v string) error { o.dueBefore = v; return nil }},
	{long: "due-after", value: true, verbs: []string{"cancel_scheduled"}, set: func(o *options, v string) error { o.dueAfter = v; return nil }},
	{long: "all", verbs: []string{"cancel_scheduled"}, set: func(o *options, _ string) error { o.all = true; return nil }},
	{long: "unit", value: true, verbs: []string{"status", "check_certificate_expiration"}, set: func(o *options, v string) error { o.unit = v; return nil }},
	{long: "within", value: true, verbs: []string{"check_certificate_expiration"}, set: func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("--within %q: want an integer", v)
		}
		o.within = &n
		return nil
	}},
	{long: "detach", verbs: []string{"redrive"}, set: func(o *options, _ string) error { o.detach = true; return nil }},
	{long: "rate", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || !(n > 0) || math.IsInf(n, 0) {
			return fmt.Errorf("--rate %q: want messages a second, more than 0", v)
		}
		o.rate = n
		return nil
	}},
	{long: "max", value: true, verbs: []string{"redrive"}, set: func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--max %q: want a positive integer", v)
		}
		o.max = n
		return nil
	}},
}

func setFormatter(o *options, v string) error {
	switch v {
	case "json":
		o.json = true
	case "table":
		o.json = false
	default:
		return fmt.Errorf("formatter %q is not supported: use json or table", v)
	}
	return nil
}

func setTimeout(o *options, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 1e6 {
		return fmt.Errorf("timeout %q: want a positive number of seconds", v)
	}
	o.timeout, o.timeoutSet = time.Duration(f*float64(time.Second)), true
	return nil
}

func setPriority(o *options, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("Invalid options for this command:\n--priority : %s", v)
	}
	o.priority = n
	return nil
}

// lookupOpt finds the option named name (without dashes; short if short)
// as it means after verb ("" before the verb): -u is --if-unused after
// delete_queue and --username everywhere else.
func lookupOpt(name string, short bool, verb string) *optSpec {
	var found *optSpec
	for i := range optSpecs {
		s := &optSpecs[i]
		if (short && s.short != name) || (!short && s.long != name) {
			continue
		}
		if len(s.verbs) > 0 && slices.Contains(s.verbs, verb) {
			return s // the verb's own meaning wins
		}
		// A verb option's short name before the verb means the verb
		// option unless an option for every verb has that name.
		if found == nil && (len(s.verbs) == 0 || !short || verb == "") {
			found = s
		}
	}
	return found
}

// parseArgs parses a command line (without the program name). Options may
// come before or after the verb.
func parseArgs(args []string) (*options, error) {
	o := &options{vhost: DefaultVhost, timeout: DefaultTimeout}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			if o.verb == "" {
				o.verb = a
			}
			continue
		}
		var name, value string
		hasValue := false
		short := !strings.HasPrefix(a, "--")
		if short {
			name = a[1:]
		} else {
			name = a[2:]
		}
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, value, hasValue = name[:k], name[k+1:], true
			a = a[:strings.IndexByte(a, '=')]
		}
		spec := lookupOpt(name, short, o.verb)
		if spec == nil {
			return o, usagef(o.verb, "unrecognized option %s", a)
		}
		if spec.value && !hasValue {
			if i+1 >= len(args) {
				return o, usagef(o.verb, "option %s needs a value", a)
			}
			i++
			value = args[i]
		} else if !spec.value && hasValue {
			return o, usagef(o.verb, "option %s takes no value", a)
		}
		if err := spec.set(o, value); err != nil {
			return o, usagef(o.verb, "%v", err)
		}
		if len(spec.verbs) > 0 {
			o.given = append(o.given, spec.long)
		}
	}
	if len(pos) > 0 && pos[0] == diagnosticsPrefix {
		// "brokerctl diagnostics VERB": rabbitmq-diagnostics' command
		// line, the verb after the prefix.
		o.diagnostics, pos = true, pos[1:]
		if len(pos) == 0 {
			o.verb = ""
		}
	}
	if len(pos) > 0 {
		o.verb, o.args = pos[0], pos[1:]
	}
	for _, g := range o.given {
		spec := lookupOpt(g, false, o.verb)
		if !slices.Contains(spec.verbs, o.verb) {
			return o, usagef(o.verb, "Invalid options for this command:\n--%s", g)
		}
	}
	return o, nil
}

// endpoint resolves the base URL and credentials: flags, then the user
// info of the URL, then the environment, then the defaults.
func (o *options) endpoint(getenv func(string) string) (base *url.URL, user, pass string, err error) {
	raw := ""
	switch {
	case o.url != "" && o.node != "":
		return nil, "", "", usagef(o.verb, "--url and --node are exclusive")
	case o.url != "":
		raw = o.url
	case o.node != "":
		raw = nodeURL(o.node)
	case getenv(EnvURL) != "":
		raw = getenv(EnvURL)
	default:
		raw = DefaultURL
	}
	base, err = url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, "", "", usagef(o.verb, "management API URL %q: want http://HOST:PORT or https://HOST:PORT", raw)
	}
	user, pass = DefaultUser, DefaultPassword
	urlUser, urlPass, urlHasPass := "", "", false
	if base.User != nil {
		urlUser = base.User.Username()
		urlPass, urlHasPass = base.User.Password()
		base.User = nil
	}
	switch {
	case o.userSet:
		user = o.username
	case urlUser != "":
		user = urlUser
	case getenv(EnvUsername) != "":
		user = getenv(EnvUsername)
	}
	switch {
	case o.passSet:
		pass = o.password
	case urlHasPass:
		pass = urlPass
	case getenv(EnvPassword) != "":
		pass = getenv(EnvPassword)
	}
	base.RawQuery, base.Fragment = "", ""
	return base, user, pass, nil
}

// nodeURL turns -n's HOST[:PORT] (or rabbitmqctl's NAME@HOST) into a URL.
func nodeURL(node string) string {
	if k := strings.LastIndexByte(node, '@'); k >= 0 {
		node = node[k+1:]
	}
	host, port, err := net.SplitHostPort(node)
	if err != nil {
		host, port = strings.Trim(node, "[]"), DefaultPort
	}
	return "http://" + net.JoinHostPort(host, port)
}
