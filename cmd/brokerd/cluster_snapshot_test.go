package main

import (
	"context"
	"testing"
	"time"

	"github.com/brokerd/brokerd/internal/history"
)

// awaitCount waits until d has logged s more than n times.
func (d *daemon) awaitCount(s string, n int) {
	d.t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	for d.count(s) <= n {
		if time.Now().After(deadline) {
			d.t.Fatalf("no new log line containing %q:\n%s", s, d.log())
		}
		select {
		case <-d.done:
			d.t.Fatalf("brokerd exited with %d:\n%s", d.code, d.log())
		case <-time.After(20 * time.Millisecond): // polls the log
		}
	}
}

// A node whose data dir is wiped while it is down (a replaced disk)
// restarts under its name with an empty one and catches up from a
// snapshot of the leader's store, then from the log. That it holds
// everything is then shown by making it indispensable: the other follower
// is killed (the leader's confirms now need it), then the leader; the
// other follower restarts, and the wiped node, the only one holding the
// last confirms, leads. A drain through it finds every confirmed message.
func TestClusterWipedDataDir(t *testing.T) {
	tn := startTestNodesWith(t, `log_keep_bytes = "64KiB"`)
	l := tn.leader()
	v, o := (l+1)%3, (l+2)%3 // the wiped node, the other follower
	rec := history.New()
	p := &clusterPublisher{tn: tn, rec: rec, q: "work"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := p.run(ctx, o, 1000); err != nil {
		t.Fatal(err)
	}

	if err := tn.procs[v].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tn.procs[v].done
	tn.wipe(v)
	if err := p.run(ctx, o, 3000); err != nil {
		t.Fatal(err)
	}
	tn.start(v)
	tn.procs[v].awaitCount("cluster: snapshot installed", 0)
	if err := p.run(ctx, v, 4000); err != nil { // through the wiped node
		t.Fatal(err)
	}

	if err := tn.procs[o].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tn.procs[o].done
	if err := p.run(ctx, l, 4500); err != nil { // confirmed by l and v only
		t.Fatal(err)
	}
	if err := tn.procs[l].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tn.procs[l].done
	tn.start(o)
	tn.procs[v].awaitCount("cluster: serving clients", 0)
	drainAndCheck(t, tn.url(v), "work", rec, 4500)
}

// A node whose data dir is wiped may have acknowledged entries counted in
// their commit: it must not then help elect a leader lacking them. Here
// the leader confirms with the wiped node's acknowledgements alone (the
// other follower is down), the wiped node and the leader go down, and the
// wiped node restarts empty beside the behind follower: it withholds its
// vote, so no leader is elected until the old leader returns, and a drain
// finds every confirmed message. (Granting it, the behind follower would
// lead and the confirms would be gone.)
func TestClusterWipedNodeWithholdsVote(t *testing.T) {
	tn := startTestNodes(t)
	l := tn.leader()
	v, o := (l+1)%3, (l+2)%3 // the wiped node, the behind follower
	rec := history.New()
	p := &clusterPublisher{tn: tn, rec: rec, q: "work"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := p.run(ctx, l, 200); err != nil {
		t.Fatal(err)
	}
	tn.kill(o)
	if err := p.run(ctx, l, 1000); err != nil { // confirmed by l and v only
		t.Fatal(err)
	}
	tn.kill(v)
	tn.kill(l)
	tn.wipe(v)
	tn.start(v)
	tn.start(o)
	tn.procs[v].awaitCount("cluster: vote withheld", 0)
	if tn.serving(o) || tn.serving(v) {
		t.Fatal("a leader was elected without the old leader")
	}
	tn.start(l)
	drainAndCheck(t, tn.url(tn.leader()), "work", rec, 1000)
}
