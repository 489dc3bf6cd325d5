package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// printer writes a verb's output as rabbitmqctl does: see "Output" in
// doc.go. Not safe for concurrent use.
type printer struct {
	w         io.Writer
	quiet     bool // no informational line
	noHeaders bool // no header line
	json      bool
	err       error // first write error, sticky
}

func (p *printer) write(s string) {
	if p.err != nil {
		return
	}
	_, p.err = io.WriteString(p.w, s)
}

// info prints an informational line, unless -q, -s or --formatter json.
func (p *printer) info(format string, args ...any) {
	if p.quiet || p.json {
		return
	}
	p.write(fmt.Sprintf(format, args...) + "\n")
}

// rows prints a list: header and tab-separated rows, or the JSON array.
// A row holds the columns' values as decoded from the API.
func (p *printer) rows(cols []column, rows [][]any) {
	if p.json {
		p.write("[\n")
		for i, r := range rows {
			if i > 0 {
				p.write(",")
			}
			p.write(jsonObject(cols, r) + "\n")
		}
		p.write("]\n")
		return
	}
	if len(rows) == 0 {
		return // rabbitmqctl prints no header for nothing
	}
	if !p.noHeaders {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		p.write(strings.Join(names, "\t") + "\n")
	}
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c.text(r[i])
		}
		p.write(strings.Join(cells, "\t") + "\n")
	}
}

// jsonObject encodes one row as a JSON object with the columns in order.
func jsonObject(cols []column, row []any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonText(c.name))
		b.WriteByte(':')
		b.WriteString(jsonText(c.json(row[i])))
	}
	b.WriteByte('}')
	return b.String()
}

// jsonText encodes v compactly, without HTML escaping (rabbitmqctl prints
// "<" as is).
func jsonText(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only decoded JSON values and strings get here.
		return strconv.Quote(fmt.Sprint(v))
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// plain is the table rendering of a scalar value: strings raw, numbers as
// the server wrote them, true/false, null as "". Lists and tables are
// rendered as Erlang terms, as rabbitmqctl prints them.
func plain(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	default:
		return term(v)
	}
}

// term renders a JSON value as rabbitmqctl prints an AMQP field value:
// strings quoted, tables as [{"key",value},...] sorted by key, arrays as
// [a,b]. The management API sorts table keys too, so both agree.
func term(v any) string {
	switch v := v.(type) {
	case nil:
		return "undefined"
	case string:
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = term(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := sortedKeys(v)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "{" + strconv.Quote(k) + "," + term(v[k]) + "}"
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		return fmt.Sprint(v)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// atomList renders a list of names as rabbitmqctl prints a list of atoms:
// [administrator, monitoring]. The management API of RabbitMQ before 3.9
// gave user tags as one comma-separated string, which is accepted too.
func atomList(v any) string {
	return "[" + strings.Join(stringList(v), ", ") + "]"
}

// stringList reads a list of strings, or a comma-separated string.
func stringList(v any) []string {
	switch v := v.(type) {
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			out = append(out, plain(e))
		}
		return out
	case string:
		if v == "" {
			return []string{}
		}
		return strings.Split(v, ",")
	}
	return []string{}
}

// compactJSON renders a value as JSON, keys sorted: how rabbitmqctl prints
// a policy definition.
func compactJSON(v any) string {
	if v == nil {
		return ""
	}
	return jsonText(v)
}

// nodeStates renders a vhost's cluster_state, {"node":"running"}, as
// rabbitmqctl does: [{node, running}].
func nodeStates(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return plain(v)
	}
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = "{" + k + ", " + plain(m[k]) + "}"
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// protocolTerm renders the API's "AMQP 0-9-1" as rabbitmqctl's {0,9,1}.
func protocolTerm(v any) string {
	s, ok := v.(string)
	if !ok {
		return plain(v)
	}
	if ver, found := strings.CutPrefix(s, "AMQP "); found {
		return "{" + strings.ReplaceAll(ver, "-", ",") + "}"
	}
	return s
}

// nullEmpty is the JSON rendering of most columns: the value, null as "".
func nullEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}
