package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"
)

// A killed leader is replaced, and once restarted serves again with the data it had, on its
// own endpoint.
func TestRestartKilledLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Start(t, Options{Members: 3})
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	if leader.Running() {
		t.Fatal("a killed member runs")
	}
	if next, err := c.Leader(ctx); err != nil || next == leader {
		t.Fatalf("leader after the kill: %v %v", next, err)
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Restart(); err == nil {
		t.Fatal("a running member restarted")
	}
	own := c.ClientOf(t, leader.Endpoint)
	resp, err := own.Get(ctx, "before") // linearizable: the member is back in the cluster
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("read through the restarted member: %v %v", resp, err)
	}
}

// A port taken between the moment it was found free and the member's bind (tests of other
// packages, and the clients they dial, take loopback ports all the time) costs a new try on
// other ports, not the test: in this process and in a child.
func TestStartTriesOtherPortsWhenOneIsTaken(t *testing.T) {
	for _, opts := range []Options{{}, {Process: true, NoFsync: true}} {
		t.Run(fmt.Sprintf("process=%v", opts.Process), func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			offered := false
			pickURL = func() (*url.URL, error) {
				if !offered {
					offered = true
					return url.Parse("http://" + taken.Addr().String())
				}
				return freeURL()
			}
			defer func() { pickURL = freeURL }()
			c := Start(t, opts)
			if !offered {
				t.Fatal("the taken port was never offered")
			}
			if c.Endpoints[0] == "http://"+taken.Addr().String() {
				t.Fatalf("the member serves on the taken port %s", c.Endpoints[0])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Client(t).Put(ctx, "k", "v"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A killed member whose client port something else took meanwhile starts again once the port is
// free, within Restart.
func TestRestartWaitsForItsPort(t *testing.T) {
	c := Start(t, Options{})
	m := c.Members[0]
	m.Kill()
	taken, err := net.Listen("tcp", m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		taken.Close()
	}()
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client(t).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
}
