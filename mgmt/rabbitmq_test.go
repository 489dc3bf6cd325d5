package mgmt_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A definitions file exported from RabbitMQ 3.10.8 (testdata/README.md
// says how it was made) imports into brokerd, and its users, routes,
// dead-lettering and permissions behave as they did on RabbitMQ: the
// expectations recorded there are replayed by the same program
// (testdata/amqptool verify). brokerd's own export of that topology then
// imports into a fresh brokerd and passes the same replay.
func TestRabbitMQDefinitionsImport(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: it runs testdata/amqptool")
	}
	const defs, expect = "testdata/rabbitmq-3.10-definitions.json", "testdata/rabbitmq-3.10-definitions.expect.json"
	file, err := os.ReadFile(defs)
	if err != nil {
		t.Fatal(err)
	}
	tool := t.TempDir() + "/amqptool"
	if out, err := exec.Command(goBin, "build", "-o", tool, "./testdata/amqptool").CombinedOutput(); err != nil {
		t.Fatalf("build amqptool: %v\n%s", err, out)
	}
	verify := func(a *api) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), tool, "verify", "-amqp", a.Addr,
			"-http", strings.TrimSuffix(a.base, "/api"), "-defs", defs, "-expect", expect)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("amqptool verify: %v\n%s", err, out)
		}
	}

	a := startAPI(t)
	a.must(204, "POST", "/definitions", string(file))
	verify(a)

	export := a.must(200, "GET", "/definitions", nil).object(t)
	b := startAPI(t)
	b.must(204, "POST", "/definitions", export)
	verify(b)
}
