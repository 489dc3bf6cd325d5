package clients

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The RabbitMQ Java client as Debian packages it, run by a JDK's
// single-file source launcher (java 11+), so nothing is compiled ahead.
const (
	javaClientJar = "/usr/share/java/amqp-client.jar"
	javaSLF4JJar  = "/usr/share/java/slf4j-api.jar" // amqp-client logs through it
	javaSLF4JNop  = "/usr/share/java/slf4j-nop.jar" // silences slf4j's "no binding" warning
)

func TestJavaDeadLetter(t *testing.T) {
	for _, jar := range []string{javaClientJar, javaSLF4JJar} {
		if _, err := os.Stat(jar); err != nil {
			t.Skipf("%s missing: install Debian package librabbitmq-client-java (%v)", jar, err)
		}
	}
	// The source launcher needs the compiler, which only a JDK has.
	if _, err := exec.LookPath("javac"); err != nil {
		t.Skipf("no JDK (javac): install Debian package default-jdk-headless (%v)", err)
	}
	cp := javaClientJar + ":" + javaSLF4JJar
	if _, err := os.Stat(javaSLF4JNop); err == nil {
		cp += ":" + javaSLF4JNop
	}
	b := startBroker(t)
	start := time.Now()
	out := runClient(t, 2*time.Minute, nil, "java", "-cp", cp, testdata(t, "Client.java"), b.host, b.port, "java")
	checkDeadLetter(t, parseResult(t, out), "java", start)
}
