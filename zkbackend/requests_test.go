package zkbackend_test

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// ZooKeeper's opcodes of a sync request and of a ping.
const (
	opSync = 9
	opPing = 11
)

// opCounter counts the requests a client sends, by opcode, read off the wire: each packet is
// a 4-byte length and a body; the first of a connection is the session's connect request, and
// every other starts with the xid and the opcode.
type opCounter struct {
	mu  sync.Mutex
	ops map[int32]int
}

// countedClient is newClient's Client on a connection whose requests are counted.
func countedClient(t testing.TB) (*fencelock.Client, *opCounter) {
	ops := &opCounter{}
	c := fencelock.New(newBackend(dial(t, server.Addr, ops.dial)), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	t.Cleanup(func() { _ = c.Close() })
	return c, ops
}

func (c *opCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: conn, c: c}, nil
}

func (c *opCounter) count(op int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// total is the count of every request but pings, which go-zookeeper sends on its own.
func (c *opCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for op, k := range c.ops {
		if op != opPing {
			n += k
		}
	}
	return n
}

type countedConn struct {
	net.Conn
	c         *opCounter
	buf       []byte
	connected bool // the connect request went by
}

func (cc *countedConn) Write(p []byte) (int, error) {
	cc.buf = append(cc.buf, p...)
	for len(cc.buf) >= 4 {
		n := int(binary.BigEndian.Uint32(cc.buf))
		if len(cc.buf) < 4+n {
			break
		}
		body := cc.buf[4 : 4+n]
		if cc.connected && len(body) >= 8 {
			cc.c.mu.Lock()
			if cc.c.ops == nil {
				cc.c.ops = make(map[int32]int)
			}
			cc.c.ops[int32(binary.BigEndian.Uint32(body[4:8]))]++
			cc.c.mu.Unlock()
		}
		cc.connected = true
		cc.buf = cc.buf[4+n:]
	}
	return cc.Conn.Write(p)
}

// A waiter granted a moment after it joined the line rests the grant on the create that made
// its node, a write the leader answered, and sends no sync; one that waited more than a
// quarter of the session timeout syncs, and its validity counts from the read after that sync,
// not from the create. So for a lock's waiter as for a permit's. Before, every waiter synced on
// waking.
func TestGrantAfterAShortWaitRestsOnTheCreate(t *testing.T) {
	holder, hb := newClient(t)
	admin := dial(t, server.Addr, nil)
	waiter, ops := countedClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	kinds := []struct {
		name string
		take func(*fencelock.Client, string) (*fencelock.Lock, error)
	}{
		{"lock", func(c *fencelock.Client, name string) (*fencelock.Lock, error) { return c.Obtain(ctx, name) }},
		{"permit", func(c *fencelock.Client, name string) (*fencelock.Lock, error) {
			return c.Semaphore(name, 1).Acquire(ctx)
		}},
	}
	for _, kind := range kinds {
		name := lockName(t) + "-" + kind.name
		for _, wait := range []time.Duration{0, sessionTimeout/4 + 200*time.Millisecond} {
			first, err := kind.take(holder, name)
			if err != nil {
				t.Fatal(err)
			}
			got := takeBehind(t, func() (*fencelock.Lock, error) { return kind.take(waiter, name) }, func() bool {
				children, _, err := admin.Children(hb.Path(name)) // lock or permit nodes
				return err == nil && len(children) == 2
			})
			time.Sleep(wait)
			syncs := ops.count(opSync)
			released := time.Now()
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				t.FailNow()
			}
			syncs = ops.count(opSync) - syncs
			switch {
			case wait == 0 && syncs != 0:
				t.Errorf("%s granted at once after joining the line: %d syncs, want none", kind.name, syncs)
			case wait > 0 && syncs == 0:
				t.Errorf("%s granted %v after joining the line: no sync", kind.name, wait)
			case wait > 0 && !l.ValidUntil().After(released.Add(sessionTimeout*17/20)):
				// Counted from the read, it is the session timeout less the Client's drift
				// allowance (1% and 2ms) from after the release; from the create, 700ms less.
				t.Errorf("%s granted %v after joining the line: valid for %v after the release, counted from before it", kind.name, wait, l.ValidUntil().Sub(released))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
