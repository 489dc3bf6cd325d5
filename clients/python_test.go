package clients

import (
	"os/exec"
	"testing"
	"time"
)

// Python clients besides pika (which broker/protocol_test.go drives).

// python returns an interpreter that can import module: python3 on PATH
// may be another interpreter than the one Debian's python3-* packages
// install into.
func python(t *testing.T, module, debianPackage string) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	t.Skipf("no python3 can \"import %s\": install Debian package %s", module, debianPackage)
	return ""
}

func TestKombuDeadLetter(t *testing.T) {
	py := python(t, "kombu", "python3-kombu")
	b := startBroker(t)
	start := time.Now()
	out := runClient(t, time.Minute, nil, py, testdata(t, "kombu_client.py"), b.host, b.port, "kombu")
	checkDeadLetter(t, parseResult(t, out), "kombu", start)
}

func TestAioPikaDeadLetter(t *testing.T) {
	py := python(t, "aio_pika", "python3-aio-pika")
	b := startBroker(t)
	start := time.Now()
	out := runClient(t, time.Minute, nil, py, testdata(t, "aiopika_client.py"), b.host, b.port, "aiopika")
	checkDeadLetter(t, parseResult(t, out), "aiopika", start)
}
