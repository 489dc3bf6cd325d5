package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// specPath is the protocol definition the code is generated from, kept in
// the repository so that a plain clone checks spec_gen.go is current.
const specPath = "testdata/amqp-rabbitmq-0.9.1.json"

// sharedSpecPath is where the project's reference copy sits in a checkout
// with shared/ beside the repository.
const sharedSpecPath = "../../../../shared/amqp/amqp-rabbitmq-0.9.1.json"

// TestSpecMatchesSharedCopy: the repository's copy of the definition is
// the project's reference one (skipped where shared/ is not beside the
// repository).
func TestSpecMatchesSharedCopy(t *testing.T) {
	shared, err := os.ReadFile(sharedSpecPath)
	if err != nil {
		t.Skipf("no shared/ checkout beside the repository: %v", err)
	}
	ours, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, shared) {
		t.Fatalf("%s differs from %s: copy it and run go generate ./amqp/", specPath, sharedSpecPath)
	}
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	s, err := load(specPath)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGeneratedUpToDate fails when spec_gen.go was edited by hand or the
// generator changed without `go generate ./amqp/`.
func TestGeneratedUpToDate(t *testing.T) {
	s := loadSpec(t)
	want, err := generate(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../spec_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("amqp/spec_gen.go is stale: run go generate ./amqp/")
	}
	again, _ := generate(s)
	if !bytes.Equal(again, want) {
		t.Fatal("generator output is not deterministic")
	}
}

// TestBasicPropertyOrder guards amqp/properties.go, which is written by hand:
// its flags assume this order, bit 15 first.
func TestBasicPropertyOrder(t *testing.T) {
	s := loadSpec(t)
	want := "content-type content-encoding headers delivery-mode priority correlation-id reply-to " +
		"expiration message-id timestamp type user-id app-id cluster-id"
	for _, c := range s.Classes {
		if c.Name != "basic" {
			continue
		}
		var names []string
		for _, p := range c.Properties {
			names = append(names, p.Name)
		}
		if got := strings.Join(names, " "); got != want {
			t.Fatalf("basic properties are\n%s\nproperties.go assumes\n%s", got, want)
		}
		return
	}
	t.Fatal("no basic class")
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{
		"reserved-1": "Reserved1", "no-ack": "NoAck", "nowait": "Nowait", "routing-key": "RoutingKey",
		"class-id": "ClassID", "if-unused": "IfUnused", "virtual-host": "VirtualHost",
		"FRAME-MIN-SIZE": "FrameMinSize", "recover-async": "RecoverAsync", "get-ok": "GetOk",
	} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBitRuns covers packing the 0-9-1 spec never exercises: more than eight
// consecutive bits, and two runs in one method.
func TestBitRuns(t *testing.T) {
	var args []argument
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		args = append(args, argument{Name: n, Type: "bit"})
	}
	args = append(args, argument{Name: "o", Type: "octet"}, argument{Name: "j", Type: "bit"})
	s := &spec{Classes: []class{{ID: 1, Name: "test", Methods: []method{{ID: 1, Name: "m", Arguments: args}}}}}
	src, err := generate(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"if m.H {\n\t\tbits0 |= 1 << 7\n\t}", // eighth bit ends the first octet
		"if m.I {\n\t\tbits1 |= 1 << 0\n\t}", // ninth starts a new one
		"if m.J {\n\t\tbits2 |= 1 << 0\n\t}", // a run after another field starts afresh
		"m.I = bits1&(1<<0) != 0",
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("generated code lacks %q", want)
		}
	}
}
