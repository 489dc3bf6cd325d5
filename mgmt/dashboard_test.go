package mgmt_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// dashboardPath is the Grafana dashboard shipped in dist/.
const dashboardPath = "../dist/grafana/brokerd.json"

// TestDashboardQueriesExportedMetrics parses the PromQL of every query of
// the Grafana dashboard (panel targets and template variables) and checks
// that each metric it names is one a real /metrics scrape of brokerd (on
// the disk store, with a queue, so every family is there) returns.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	a := startMetricsAPI(t, brokertest.Disk(), 1000)
	conn, ch := a.Channel(t)
	defer conn.Close()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "q", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	exported := seriesNames(a.scrape())

	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("found %d queries in %s; the dashboard has more", len(queries), dashboardPath)
	}
	used := map[string]bool{}
	for _, q := range queries {
		names, err := promqlMetricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s: %q uses %s, which brokerd does not export", q.where, q.expr, n)
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, n := range []string{"brokerd_queue_messages_ready", "brokerd_dead_letters_delivered_total", "brokerd_dead_letters_dropped_total",
		"brokerd_wal_fsync_duration_seconds_bucket", "brokerd_alarms_memory_used_watermark", "brokerd_alarms_free_disk_space_watermark"} {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
}

// seriesNames returns the names samples of the scraped families carry: a
// histogram's _bucket, _sum and _count, a summary's _sum and _count.
func seriesNames(s scrape) map[string]bool {
	out := map[string]bool{}
	for name, f := range s {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out
}

type dashboardQuery struct{ where, expr string }

// labelValues is Grafana's template query label_values(expr, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// dashboardQueries returns every PromQL expression of the dashboard.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
			Panels []json.RawMessage `json:"panels"` // collapsed rows
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query json.RawMessage
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("parse %s: %v", dashboardPath, err)
	}
	var out []dashboardQuery
	for _, p := range d.Panels {
		if len(p.Panels) > 0 {
			t.Fatalf("row %q is collapsed: its panels would not be checked", p.Title)
		}
		for i, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q target %d has no expr", p.Title, i)
			}
			out = append(out, dashboardQuery{fmt.Sprintf("panel %q target %d", p.Title, i), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(expr, label)", v.Name, q.Query)
		}
		out = append(out, dashboardQuery{"variable " + v.Name, m[1]})
	}
	return out
}

// PromQL's functions and aggregation operators, and its keywords.
var (
	promqlFuncs = strings.Fields(`abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min
		count_over_time day_of_month day_of_week day_of_year days_in_month delta deriv exp floor
		histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar histogram_sum
		holt_winters hour idelta increase irate label_join label_replace last_over_time ln log10 log2
		mad_over_time max_over_time min_over_time minute month predict_linear present_over_time
		quantile_over_time rate resets round scalar sgn sort sort_desc sqrt stddev_over_time
		stdvar_over_time sum_over_time time timestamp vector year`)
	promqlAggregations = strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk quantile`)
	promqlKeywords     = strings.Fields(`and or unless bool offset atan2 by without on ignoring group_left group_right inf nan`)
)

// promqlMetricNames lexes a PromQL expression (with Grafana's $variables)
// and returns the metric names it selects: every identifier that is not a
// function, an aggregation, a keyword, a label name (inside {...} or the
// (...) of by, without, on, ignoring, group_left, group_right) or inside a
// string, range or duration. It fails on unbalanced brackets, unterminated
// strings and calls of unknown functions.
func promqlMetricNames(expr string) ([]string, error) {
	var names []string
	var stack []byte // open brackets
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	nextNonSpace := func(i int) int {
		for i < len(expr) && strings.IndexByte(" \t\r\n", expr[i]) >= 0 {
			i++
		}
		return i
	}
	// skipString returns the index just past the string starting at i.
	skipString := func(i int) (int, error) {
		q := expr[i]
		for k := i + 1; k < len(expr); k++ {
			switch {
			case expr[k] == '\\' && q != '`':
				k++
			case expr[k] == q:
				return k + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string at %d", i)
	}
	// skipTo returns the index just past the bracket closing the one at i,
	// skipping strings.
	skipTo := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(expr); j++ {
			switch c := expr[j]; c {
			case '"', '\'', '`':
				k, err := skipString(j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d", open, i)
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case strings.IndexByte(" \t\r\n+-*/%^=!<>,", c) >= 0:
			i++
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '(':
			stack = append(stack, '(')
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			stack = stack[:len(stack)-1]
			i++
		case c == '}' || c == ']':
			return nil, fmt.Errorf("unbalanced %c at %d", c, i)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++ // a number or duration, e.g. 0.99, 5m, 1e3
			}
		case c == '$':
			i++ // a Grafana variable: $name or ${name}
			if i < len(expr) && expr[i] == '{' {
				j, err := skipTo(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := nextNonSpace(j)
			call := k < len(expr) && expr[k] == '('
			if slices.Contains(promqlAggregations, word) {
				// sum by (le) (...): the clause comes before the call.
				e := k
				for e < len(expr) && isIdent(expr[e]) {
					e++
				}
				if w := expr[k:e]; w == "by" || w == "without" {
					call = true
				}
			}
			switch {
			case slices.Contains(promqlKeywords, word):
				if call && word != "atan2" { // a label list: by (vhost, queue)
					end, err := skipTo(k, '(', ')')
					if err != nil {
						return nil, err
					}
					j = end
				}
			case call:
				if !slices.Contains(promqlFuncs, word) && !slices.Contains(promqlAggregations, word) {
					return nil, fmt.Errorf("unknown function %s", word)
				}
			default:
				names = append(names, word)
			}
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return names, nil
}

// TestPromQLMetricNames checks the lexer the dashboard test relies on.
func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  bool
	}{
		{`sum by (reason) (rate(brokerd_dead_letters_delivered_total{instance=~"$instance",reason!="x}"}[$__rate_interval]))`, []string{"brokerd_dead_letters_delivered_total"}, false},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / on (instance) group_left b`, []string{"a_bucket", "b"}, false},
		{`sum(x) without (queue) + topk(10, y offset 1h) > bool 3`, []string{"x", "y"}, false},
		{`sum(rate(x[1m])`, nil, true},
		{`sumx(y)`, nil, true},
		{`x{a="b}`, nil, true},
	} {
		got, err := promqlMetricNames(tc.expr)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v (error %v)", tc.expr, got, err, tc.want, tc.err)
		}
	}
}

// TestMetricsDocumented checks that README.md's metric table lists every
// brokerd_ metric a real scrape (disk store, one queue, a cluster node's
// status) returns, and nothing else.
func TestMetricsDocumented(t *testing.T) {
	a := startMetricsAPI(t, brokertest.Disk(), 1000, withCluster(leaderStatus))
	conn, ch := a.Channel(t)
	defer conn.Close()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	s := a.scrape()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "\n### Metrics\n")
	if !ok {
		t.Fatal(`README.md has no "### Metrics" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n#")
	row := regexp.MustCompile("(?m)^\\| `(brokerd_[a-z_]+)` \\| ([a-z]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		documented[m[1]] = m[2]
	}
	for name, f := range s {
		if !strings.HasPrefix(name, "brokerd_") {
			continue
		}
		typ, ok := documented[name]
		if !ok {
			t.Errorf("README.md's metric table does not list %s", name)
		} else if want := strings.ToLower(f.GetType().String()); typ != want {
			t.Errorf("README.md says %s is a %s; it is a %s", name, typ, want)
		}
	}
	for name := range documented {
		if s[name] == nil {
			t.Errorf("README.md lists %s, which brokerd does not export", name)
		}
	}
}
