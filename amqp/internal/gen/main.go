// Command gen writes amqp/spec_gen.go from RabbitMQ's machine-readable AMQP
// 0-9-1 definition (amqp-rabbitmq-0.9.1.json): constants, reply codes, one
// struct per method with its argument codec, and the method lookup tables.
//
// It is run by `go generate ./amqp/`; the output is committed so that building
// brokerd never needs the JSON. Output depends only on the JSON, so re-running
// it on the same input yields the same bytes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

func main() {
	specPath := flag.String("spec", "", "path to amqp-rabbitmq-0.9.1.json")
	outPath := flag.String("out", "spec_gen.go", "output Go file")
	flag.Parse()
	if *specPath == "" {
		log.Fatal("gen: -spec is required")
	}
	s, err := load(*specPath)
	if err != nil {
		log.Fatalf("gen: %v", err)
	}
	src, err := generate(s)
	if err != nil {
		log.Fatalf("gen: %v", err)
	}
	if err := os.WriteFile(*outPath, src, 0o644); err != nil {
		log.Fatalf("gen: write output: %v", err)
	}
}

// spec mirrors the parts of the JSON the generator uses. Everything else
// (default values, copyright, port) is ignored.
type spec struct {
	Domains   [][2]string `json:"domains"`
	Constants []constant  `json:"constants"`
	Classes   []class     `json:"classes"`
}

type constant struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
	Class string `json:"class"` // "soft-error", "hard-error" or "" for non-reply constants
}

type class struct {
	ID         int        `json:"id"`
	Name       string     `json:"name"`
	Methods    []method   `json:"methods"`
	Properties []argument `json:"properties"`
}

type method struct {
	ID          int        `json:"id"`
	Name        string     `json:"name"`
	Synchronous bool       `json:"synchronous"`
	Content     bool       `json:"content"`
	Arguments   []argument `json:"arguments"`
}

type argument struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Domain string `json:"domain"`
}

func load(path string) (*spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("parse spec %s: %w", path, err)
	}
	return &s, nil
}

// goTypes maps AMQP base types to Go types and to the decoder method that
// reads them (see decoder in amqp/method.go).
var goTypes = map[string]struct{ goType, read string }{
	"octet":     {"uint8", "octet"},
	"short":     {"uint16", "short"},
	"long":      {"uint32", "long"},
	"longlong":  {"uint64", "longlong"},
	"timestamp": {"uint64", "longlong"},
	"shortstr":  {"string", "shortstr"},
	"longstr":   {"string", "longstr"},
	"table":     {"Table", "table"},
	"bit":       {"bool", ""},
}

// methodSet holds the names of the Method interface's methods. A field with
// one of these names would not compile, so such fields are renamed.
var methodSet = map[string]bool{
	"ClassID": true, "MethodID": true, "Name": true, "HasContent": true,
	"Synchronous": true, "AppendArgs": true,
}

// fieldRenames resolves the collisions with methodSet: connection.close and
// channel.close carry the class and method ids of the method that failed.
var fieldRenames = map[string]string{
	"ClassID":  "FailingClassID",
	"MethodID": "FailingMethodID",
}

// camel turns "routing-key" into "RoutingKey" and "class-id" into "ClassID".
func camel(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(name), "-") {
		if part == "" {
			continue
		}
		if part == "id" {
			b.WriteString("ID")
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// replyName is RabbitMQ's spelling of a reply code: "NOT_FOUND".
func replyName(name string) string {
	return strings.ReplaceAll(strings.ToUpper(name), "-", "_")
}

type field struct {
	wire    string // JSON name
	goName  string
	renamed bool   // goName is not camel(wire); see fieldRenames
	base    string // AMQP base type
	domain  string // JSON domain, or base if given as a type
}

func (s *spec) fields(m method) ([]field, error) {
	domains := make(map[string]string, len(s.Domains))
	for _, d := range s.Domains {
		domains[d[0]] = d[1]
	}
	var out []field
	for _, a := range m.Arguments {
		f := field{wire: a.Name, goName: camel(a.Name), base: a.Type, domain: a.Type}
		if a.Domain != "" {
			base, ok := domains[a.Domain]
			if !ok {
				return nil, fmt.Errorf("method %s argument %s: unknown domain %q", m.Name, a.Name, a.Domain)
			}
			f.base, f.domain = base, a.Domain
		}
		if _, ok := goTypes[f.base]; !ok {
			return nil, fmt.Errorf("method %s argument %s: unknown type %q", m.Name, a.Name, f.base)
		}
		if r, ok := fieldRenames[f.goName]; ok {
			f.goName, f.renamed = r, true
		}
		if methodSet[f.goName] {
			return nil, fmt.Errorf("method %s argument %s: Go name %s collides with a Method method", m.Name, a.Name, f.goName)
		}
		out = append(out, f)
	}
	return out, nil
}

type gen struct {
	bytes.Buffer
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.Buffer, format, args...)
	g.WriteByte('\n')
}

func generate(s *spec) ([]byte, error) {
	var g gen
	g.p("// Code generated by internal/gen from amqp-rabbitmq-0.9.1.json; DO NOT EDIT.")
	g.p("")
	g.p("package amqp")
	g.p("")
	g.p(`import "encoding/binary"`)
	g.p("")

	// Constants without a class are frame types and sizes; those with a class,
	// and REPLY-SUCCESS, are reply codes.
	var frameConsts, replies []constant
	for _, c := range s.Constants {
		if c.Class != "" || c.Name == "REPLY-SUCCESS" {
			replies = append(replies, c)
		} else {
			frameConsts = append(frameConsts, c)
		}
	}
	g.p("// Frame types and sizes. Wire format; never renumber.")
	g.p("const (")
	for _, c := range frameConsts {
		g.p("%s = %d", camel(c.Name), c.Value)
	}
	g.p(")")
	g.p("")
	g.p("// Reply codes, as carried by connection.close and channel.close. Wire format; never renumber.")
	g.p("const (")
	for _, c := range replies {
		kind := c.Class
		if kind == "" {
			kind = "success"
		}
		g.p("%s = %d // %s, %s", camel(c.Name), c.Value, replyName(c.Name), kind)
	}
	g.p(")")
	g.p("")
	g.p("// ReplyName returns RabbitMQ's name for a reply code, such as \"NOT_FOUND\",")
	g.p("// or \"\" for a code the protocol does not define.")
	g.p("func ReplyName(code uint16) string {")
	g.p("switch code {")
	for _, c := range replies {
		g.p("case %s:", camel(c.Name))
		g.p("return %q", replyName(c.Name))
	}
	g.p("}")
	g.p(`return ""`)
	g.p("}")
	g.p("")
	var hard []string
	for _, c := range replies {
		if c.Class == "hard-error" {
			hard = append(hard, camel(c.Name))
		}
	}
	g.p("// IsHardError reports whether code is a connection exception: one that")
	g.p("// closes the whole connection rather than just the channel.")
	g.p("func IsHardError(code uint16) bool {")
	if len(hard) > 0 {
		g.p("switch code {")
		g.p("case %s:", strings.Join(hard, ", "))
		g.p("return true")
		g.p("}")
	}
	g.p("return false")
	g.p("}")
	g.p("")

	g.p("// Class ids. Wire format; never renumber.")
	g.p("const (")
	for _, c := range s.Classes {
		g.p("Class%s = %d", camel(c.Name), c.ID)
	}
	g.p(")")
	g.p("")

	type entry struct {
		key    string // "10<<16 | 11"
		goType string
		name   string
	}
	var entries []entry
	seen := map[string]bool{}
	for _, c := range s.Classes {
		for _, m := range c.Methods {
			typ := camel(c.Name) + camel(m.Name)
			if seen[typ] {
				return nil, fmt.Errorf("duplicate method type %s", typ)
			}
			seen[typ] = true
			fields, err := s.fields(m)
			if err != nil {
				return nil, err
			}
			name := c.Name + "." + m.Name
			entries = append(entries, entry{fmt.Sprintf("%d<<16 | %d", c.ID, m.ID), typ, name})
			genMethod(&g, c, m, typ, name, fields)
		}
	}

	g.p("// newMethod returns a zero method of the given ids, or nil if the protocol")
	g.p("// has no such method.")
	g.p("func newMethod(classID, methodID uint16) Method {")
	g.p("switch uint32(classID)<<16 | uint32(methodID) {")
	for _, e := range entries {
		g.p("case %s:", e.key)
		g.p("return new(%s)", e.goType)
	}
	g.p("}")
	g.p("return nil")
	g.p("}")
	g.p("")
	g.p("// MethodName returns the protocol name of a method, such as \"basic.publish\",")
	g.p("// or \"\" if the protocol has no such method.")
	g.p("func MethodName(classID, methodID uint16) string {")
	g.p("switch uint32(classID)<<16 | uint32(methodID) {")
	for _, e := range entries {
		g.p("case %s:", e.key)
		g.p("return %q", e.name)
	}
	g.p("}")
	g.p(`return ""`)
	g.p("}")

	src, err := format.Source(g.Bytes())
	if err != nil {
		return nil, fmt.Errorf("format generated code: %w", err)
	}
	return src, nil
}

func genMethod(g *gen, c class, m method, typ, name string, fields []field) {
	var traits []string
	if m.Synchronous {
		traits = append(traits, "synchronous")
	}
	if m.Content {
		traits = append(traits, "carries content")
	}
	desc := ""
	if len(traits) > 0 {
		desc = "; " + strings.Join(traits, ", ")
	}
	g.p("// %s is %s (class %d, method %d)%s.", typ, name, c.ID, m.ID, desc)
	if len(fields) == 0 {
		g.p("type %s struct{}", typ)
	} else {
		g.p("type %s struct {", typ)
		for _, f := range fields {
			comment := f.wire + ": " + f.base
			if f.domain != f.base {
				comment = f.wire + ": " + f.domain + " (" + f.base + ")"
			}
			if f.renamed {
				comment += "; not " + camel(f.wire) + ", which is a Method method"
			}
			g.p("%s %s // %s", f.goName, goTypes[f.base].goType, comment)
		}
		g.p("}")
	}
	g.p("")
	g.p("func (*%s) ClassID() uint16 { return %d }", typ, c.ID)
	g.p("func (*%s) MethodID() uint16 { return %d }", typ, m.ID)
	g.p("func (*%s) Name() string { return %q }", typ, name)
	g.p("func (*%s) HasContent() bool { return %t }", typ, m.Content)
	g.p("func (*%s) Synchronous() bool { return %t }", typ, m.Synchronous)
	g.p("")

	// Consecutive bits share an octet, first field in the lowest bit; a ninth
	// consecutive bit starts a new octet.
	type group struct {
		bits []field // a run of bit fields, or nil for a single non-bit field
		n    int     // index of this run among the method's bit runs
		one  field
	}
	var groups []group
	runs := 0
	for i := 0; i < len(fields); {
		if fields[i].base != "bit" {
			groups = append(groups, group{one: fields[i]})
			i++
			continue
		}
		var run []field
		for i < len(fields) && fields[i].base == "bit" && len(run) < 8 {
			run = append(run, fields[i])
			i++
		}
		groups = append(groups, group{bits: run, n: runs})
		runs++
	}
	// Every method in 0-9-1 has at most one run; number the variables only
	// if a future spec has more, so that the usual output reads naturally.
	bitsVar := func(n int) string {
		if runs == 1 {
			return "bits"
		}
		return fmt.Sprintf("bits%d", n)
	}

	if len(fields) == 0 {
		g.p("func (*%s) AppendArgs(dst []byte) []byte { return dst }", typ)
		g.p("")
		g.p("func (*%s) decodeArgs([]byte) error { return nil }", typ)
		g.p("")
		return
	}

	g.p("func (m *%s) AppendArgs(dst []byte) []byte {", typ)
	for _, gr := range groups {
		if gr.bits != nil {
			v := bitsVar(gr.n)
			g.p("var %s uint8", v)
			for i, f := range gr.bits {
				g.p("if m.%s { %s |= 1 << %d }", f.goName, v, i)
			}
			g.p("dst = append(dst, %s)", v)
			continue
		}
		f := gr.one
		switch f.base {
		case "octet":
			g.p("dst = append(dst, m.%s)", f.goName)
		case "short":
			g.p("dst = binary.BigEndian.AppendUint16(dst, m.%s)", f.goName)
		case "long":
			g.p("dst = binary.BigEndian.AppendUint32(dst, m.%s)", f.goName)
		case "longlong", "timestamp":
			g.p("dst = binary.BigEndian.AppendUint64(dst, m.%s)", f.goName)
		case "shortstr":
			g.p("dst = appendShortstr(dst, m.%s)", f.goName)
		case "longstr":
			g.p("dst = appendLongstr(dst, m.%s)", f.goName)
		case "table":
			g.p("dst = appendTableArg(dst, m.%s, %q)", f.goName, name+" "+f.wire)
		}
	}
	g.p("return dst")
	g.p("}")
	g.p("")

	g.p("func (m *%s) decodeArgs(b []byte) error {", typ)
	g.p("d := decoder{b: b}")
	for _, gr := range groups {
		if gr.bits != nil {
			names := make([]string, len(gr.bits))
			for i, f := range gr.bits {
				names[i] = f.wire
			}
			v := bitsVar(gr.n)
			g.p("%s := d.octet(%q)", v, strings.Join(names, ","))
			for i, f := range gr.bits {
				g.p("m.%s = %s&(1<<%d) != 0", f.goName, v, i)
			}
			continue
		}
		f := gr.one
		g.p("m.%s = d.%s(%q)", f.goName, goTypes[f.base].read, f.wire)
	}
	g.p("return d.err")
	g.p("}")
	g.p("")
}
