package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// e2eBody is message i's body: 2 KiB naming i, so it can be found in a
// file.
func e2eBody(i int) []byte {
	tag := fmt.Sprintf("<message %05d>", i)
	return bytes.Repeat([]byte(tag), 2048/len(tag))
}

// publishN declares durable queue q and publishes messages 0 … n-1 to it,
// persistent, each confirmed.
func publishN(t *testing.T, url, q string, n int) {
	t.Helper()
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Body: e2eBody(i), Headers: amqp091.Table{"i": int32(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish %d not confirmed: %v %v", i, ok, err)
		}
	}
}

// drain gets every message of q and returns the numbers it got, checking
// each body.
func drain(t *testing.T, url, q string) map[int]bool {
	t.Helper()
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{}
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get %s: %v", q, err)
		}
		if !ok {
			return got
		}
		i := int(m.Headers["i"].(int32))
		if got[i] || !bytes.Equal(m.Body, e2eBody(i)) {
			t.Fatalf("message %d delivered twice or with a wrong body", i)
		}
		got[i] = true
	}
}

// treeSums checksums every file under dir, by path.
func treeSums(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// flipIn flips one byte of the file at path, at off.
func flipIn(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runCmd runs brokerd with args in this process (verify and repair need
// no daemon), with stdin, and returns its exit status and output.
func runCmd(t *testing.T, stdin string, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	var code int
	switch args[0] {
	case "repair":
		code = runRepair(args[1:], strings.NewReader(stdin), &out, &errb)
	default:
		code = run(args, &out, &errb)
	}
	return code, out.String() + errb.String()
}

// TestDamagedSegmentEndToEnd: a flipped byte in a segment file of a
// stopped brokerd. brokerd verify (read-only: every file unchanged) exits
// 1 and says how many stored messages the damaged block held and in which
// queue; brokerd starts and serves every other message, takes the lost
// ones out of the queue as a counted loss (the queue's messages_damaged
// in the management API equals what verify said), logs the file and
// offset, and takes persistent publishes afterwards.
func TestDamagedSegmentEndToEnd(t *testing.T) {
	t.Parallel()
	const n = 400
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", data}
	d := startDaemon(t, "", args...)
	publishN(t, d.url(), "work", n)
	d.cmd.Process.Signal(syscall.SIGTERM) // the store checkpoints: bodies go to a segment
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	segs, _ := filepath.Glob(filepath.Join(data, "segments", "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segment files %v, want one", segs)
	}
	st, _ := os.Stat(segs[0])
	flipIn(t, segs[0], int(st.Size()/2))

	before := treeSums(t, data)
	code, out := runCmd(t, "", "verify", "-data", data)
	if code != exitFailed || !strings.Contains(out, "DAMAGED "+segs[0]) {
		t.Fatalf("verify exited %d, want 1 naming %s:\n%s", code, segs[0], out)
	}
	m := regexp.MustCompile(`(\d+) stored messages lost: entries (\d+) in queue 'work' in vhost '/'`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("verify does not say what the damaged block held:\n%s", out)
	}
	lost, _ := strconv.Atoi(m[1])
	if !sameTree(before, treeSums(t, data)) {
		t.Fatal("brokerd verify changed the data directory")
	}

	d = startDaemon(t, "", args...)
	got := drain(t, d.url(), "work")
	if len(got)+lost != n || lost == 0 {
		t.Fatalf("%d messages served, verify said %d lost, of %d", len(got), lost, n)
	}
	req, _ := http.NewRequest("GET", d.mgmtURL()+"/api/queues/%2F/work", nil)
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var qi map[string]any
	json.NewDecoder(res.Body).Decode(&qi)
	res.Body.Close()
	if qi["messages_damaged"] != float64(lost) || qi["messages"] != float64(0) {
		t.Fatalf("queue page: messages_damaged %v, messages %v; want %d, 0", qi["messages_damaged"], qi["messages"], lost)
	}
	if d.count("messages lost to damaged data") == 0 || !strings.Contains(d.log(), segs[0]) {
		t.Errorf("the loss was not logged with the file:\n%s", d.log())
	}
	publishN(t, d.url(), "work", 1) // the store did not fail
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestDamagedWALEndToEnd: a flipped byte in a confirmed message's WAL
// record, with intact records after it. brokerd refuses to start, exits 3
// (not restarted by systemd) and says which file, offset and record, and
// what to run; verify lists it; repair without confirmation changes
// nothing; repair -yes drops that record only, and brokerd starts with
// every other confirmed message.
func TestDamagedWALEndToEnd(t *testing.T) {
	t.Parallel()
	const n, hit = 60, 17
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data}
	d := startDaemon(t, "", args...)
	publishN(t, d.url(), "work", n)
	d.cmd.Process.Signal(syscall.SIGKILL) // no checkpoint: the WAL holds them
	d.wait()
	files, _ := filepath.Glob(filepath.Join(data, "wal", "*.wal"))
	var path string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if i := bytes.Index(b, e2eBody(hit)); i >= 0 {
			path = f
			flipIn(t, f, i+100)
		}
	}
	if path == "" {
		t.Fatalf("message %d is in no WAL file", hit)
	}

	d = startDaemon(t, "", args...)
	if code := d.wait(); code != exitDamaged {
		t.Fatalf("brokerd on a damaged WAL exited %d, want %d:\n%s", code, exitDamaged, d.log())
	}
	for _, want := range []string{path, "is lost", "intact records follow", "brokerd repair", "brokerd verify"} {
		if !strings.Contains(d.log(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, d.log())
		}
	}
	code, out := runCmd(t, "", "verify", "-data", data)
	if code != exitFailed || !strings.Contains(out, "DAMAGED "+path) || !strings.Contains(out, "refuses to start") {
		t.Fatalf("verify exited %d:\n%s", code, out)
	}
	before := treeSums(t, data)
	if code, out := runCmd(t, "no\n", "repair", "-data", data); code != exitFailed || !strings.Contains(out, "repair will:") ||
		!strings.Contains(out, "drop record(s)") || !sameTree(before, treeSums(t, data)) {
		t.Fatalf("repair answered no: exit %d, or it changed the directory:\n%s", code, out)
	}
	if code, out := runCmd(t, "", "repair", "-yes", "-data", data); code != exitOK {
		t.Fatalf("repair -yes exited %d:\n%s", code, out)
	}
	if code, out := runCmd(t, "", "verify", "-data", data); code != exitOK {
		t.Fatalf("verify after repair exited %d:\n%s", code, out)
	}
	d = startDaemon(t, "", args...)
	got := drain(t, d.url(), "work")
	for i := range n {
		if got[i] == (i == hit) {
			t.Fatalf("after repair message %d served: %v (only %d is lost)", i, got[i], hit)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestDamagedIndexEndToEnd: a flipped byte in the index. brokerd refuses
// to start, once, with status 3 and the file named, instead of serving and
// crashing at the first read of the block, after every restart; verify
// exits 1 naming it.
func TestDamagedIndexEndToEnd(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data}
	d := startDaemon(t, "", args...)
	publishN(t, d.url(), "work", 50)
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The index flushes what its log holds into an sstable when it opens.
	d = startDaemon(t, "", args...)
	d.url()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	tables, _ := filepath.Glob(filepath.Join(data, "index", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("the index has no sstable")
	}
	path := tables[0]
	st, _ := os.Stat(path)
	flipIn(t, path, int(st.Size()/3))
	d = startDaemon(t, "", args...)
	if code := d.wait(); code != exitDamaged {
		t.Fatalf("brokerd on a damaged index exited %d, want %d:\n%s", code, exitDamaged, d.log())
	}
	if !strings.Contains(d.log(), "index is damaged") || !strings.Contains(d.log(), path) || strings.Contains(d.log(), "panic") {
		t.Fatalf("the refusal does not say the index is damaged, or panicked:\n%s", d.log())
	}
	code, out := runCmd(t, "", "verify", "-data", data)
	if code != exitFailed || !strings.Contains(out, "DAMAGED "+path) {
		t.Fatalf("verify exited %d:\n%s", code, out)
	}
}
