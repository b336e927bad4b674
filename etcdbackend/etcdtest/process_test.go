package etcdtest

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	ServeIfAsked()
	os.Exit(m.Run())
}

// A Process cluster serves from a child process, which ends with Close and takes its port
// with it.
func TestProcessCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(Options{Process: true, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	if len(c.Members) != 0 || len(c.Endpoints) != 1 || c.proc == nil || c.proc.cmd.Process.Pid == os.Getpid() {
		t.Fatalf("a Process cluster: %d members, endpoints %v", len(c.Members), c.Endpoints)
	}
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "k"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("reading back from the child: %v, %v", resp, err)
	}
	c.Close()
	closed = true
	if c.proc.cmd.ProcessState == nil || !c.proc.cmd.ProcessState.Exited() {
		t.Fatalf("the child after Close: %v", c.proc.cmd.ProcessState)
	}
	u, err := url.Parse(c.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("%s still takes connections after Close", u.Host)
	}
}

// A Process cluster has one member.
func TestProcessClusterOfThree(t *testing.T) {
	if c, err := New(Options{Process: true, Members: 3}); err == nil {
		c.Close()
		t.Fatal("a Process cluster of 3 members started")
	}
}
