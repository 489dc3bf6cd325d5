package clients

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// php-amqplib as Debian packages it, with its own autoloader.
const phpAMQPLib = "/usr/share/php/PhpAmqpLib/autoload.php"

func TestPHPDeadLetter(t *testing.T) {
	if _, err := exec.LookPath("php"); err != nil {
		t.Skipf("no php: install Debian package php-cli (%v)", err)
	}
	if _, err := os.Stat(phpAMQPLib); err != nil {
		t.Skipf("%s missing: install Debian package php-amqplib (%v)", phpAMQPLib, err)
	}
	b := startBroker(t)
	start := time.Now()
	out := runClient(t, time.Minute, nil, "php", testdata(t, "client.php"), b.host, b.port, "php")
	checkDeadLetter(t, parseResult(t, out), "php", start)
}
