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
	if len(c.Members) != 0 || len(c.Endpoints) != 1 || len(c.procs) != 1 || c.procs[0].cmd.Process.Pid == os.Getpid() {
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
	if c.procs[0].cmd.ProcessState == nil || !c.procs[0].cmd.ProcessState.Exited() {
		t.Fatalf("the child after Close: %v", c.procs[0].cmd.ProcessState)
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

// A Process cluster of 3 serves from 3 children, one member each, as one cluster: a write
// through one member is read through another; Close ends them all.
func TestProcessClusterOfThree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(Options{Process: true, Members: 3, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	if len(c.Endpoints) != 3 || len(pids) != 3 || pids[0] == pids[1] || pids[1] == pids[2] || pids[0] == os.Getpid() {
		c.Close()
		t.Fatalf("a Process cluster of 3: endpoints %v, children %v", c.Endpoints, pids)
	}
	if _, err := c.ClientOf(t, c.Endpoints[0]).Put(ctx, "k", "v"); err != nil {
		c.Close()
		t.Fatal(err)
	}
	resp, err := c.ClientOf(t, c.Endpoints[2]).Get(ctx, "k")
	c.Close()
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("reading through the third member what the first wrote: %v, %v", resp, err)
	}
	for _, p := range c.procs {
		if p.cmd.ProcessState == nil || !p.cmd.ProcessState.Exited() {
			t.Fatalf("a child after Close: %v", p.cmd.ProcessState)
		}
	}
}
