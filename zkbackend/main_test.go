package zkbackend_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testmain"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// server is shared by the package's tests; each test uses lock names of its own.
var server *zktest.Server

// sessionTimeout is what the tests' connections ask for, within the server's bounds (so it is
// what the server grants): short, so that expiry tests take seconds.
const sessionTimeout = 2 * time.Second

func TestMain(m *testing.M) {
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	testmain.Run(m, func() (func(), error) {
		var err error
		if server, err = zktest.New(zktest.Options{}); err != nil {
			return nil, err
		}
		return func() { _ = server.Close() }, nil
	})
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// dial connects to addr as a separate process would, through dialer when it is not nil, waits
// for the session, and closes the connection when the test ends.
func dial(t testing.TB, addr string, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	return dialSession(t, addr, dialer, sessionTimeout)
}

// dialSession is dial with a session timeout of its own.
func dialSession(t testing.TB, addr string, dialer zk.Dialer, timeout time.Duration) *zk.Conn {
	t.Helper()
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(quietLogger{}), zk.WithDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	waitFor(t, 10*time.Second, "a ZooKeeper session", func() bool { return conn.State() == zk.StateHasSession })
	return conn
}

func newBackend(conn *zk.Conn, opts ...zkbackend.Option) *zkbackend.Backend {
	return zkbackend.New(conn, append([]zkbackend.Option{zkbackend.WithSessionTimeout(sessionTimeout)}, opts...)...)
}

// newClient returns a Client over a connection of its own, closed when the test ends.
func newClient(t testing.TB) (*fencelock.Client, *zkbackend.Backend) {
	b := newBackend(dial(t, server.Addr, nil))
	c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	t.Cleanup(func() { _ = c.Close() })
	return c, b
}

// lockName returns a lock name unique to the test.
func lockName(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// line returns the lock nodes in dir, first in line first, and nil when dir does not exist.
func line(t testing.TB, conn *zk.Conn, dir string) []string {
	t.Helper()
	children, _, err := conn.Children(dir)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var q []string
	for _, c := range children {
		if strings.HasPrefix(c, "_c_") {
			q = append(q, c)
		}
	}
	seq := func(name string) string { return name[strings.LastIndex(name, "-")+1:] }
	slices.SortFunc(q, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	return q
}

// obtainBehind starts c's Obtain of name, and returns once it waits in the line of dir, as
// its second node; the channel then yields its lock, or nil when it failed (reported to t).
func obtainBehind(ctx context.Context, t *testing.T, c *fencelock.Client, admin *zk.Conn, dir, name string) <-chan *fencelock.Lock {
	t.Helper()
	return takeBehind(t, func() (*fencelock.Lock, error) { return c.Obtain(ctx, name) },
		func() bool { return len(line(t, admin, dir)) == 2 })
}

// takeBehind starts take, and returns once inLine says it waits; the channel then yields its
// lock, or nil when it failed (reported to t).
func takeBehind(t *testing.T, take func() (*fencelock.Lock, error), inLine func() bool) <-chan *fencelock.Lock {
	t.Helper()
	got := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := take()
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the waiter in line", inLine)
	return got
}

// dropHolder deletes the first lock node of name behind its holder's back.
func dropHolder(t testing.TB, conn *zk.Conn, dir string) {
	t.Helper()
	q := line(t, conn, dir)
	if len(q) == 0 {
		t.Fatalf("nothing to drop in %s", dir)
	}
	if err := conn.Delete(dir+"/"+q[0], -1); err != nil {
		t.Fatal(err)
	}
}

func exists(t testing.TB, conn *zk.Conn, path string) bool {
	t.Helper()
	ok, _, err := conn.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// runHolder is the child process of startHolder: it holds a lock, or a permit of a semaphore
// of limit permits, through a session of its own and reports the token, then stays until it is
// killed (or, should the test binary die without killing it, for a minute).
func runHolder(spec string) int {
	f := strings.Fields(spec)
	limit := 0
	if len(f) == 4 {
		limit, _ = strconv.Atoi(f[3])
	}
	if len(f) < 3 || len(f) > 4 || len(f) == 4 && limit < 1 {
		fmt.Fprintf(os.Stderr, "%s=%q: want \"addr name owner [limit]\"\n", holderEnv, spec)
		return 2
	}
	conn, _, err := zk.Connect([]string{f[0]}, sessionTimeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := fencelock.New(newBackend(conn), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lock *fencelock.Lock
	if limit > 0 {
		lock, err = c.Semaphore(f[1], limit).Acquire(ctx, fencelock.WithOwner(f[2]))
	} else {
		lock, err = c.Obtain(ctx, f[1], fencelock.WithOwner(f[2]))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("held %d\n", lock.Token())
	time.Sleep(time.Minute)
	return 0
}

// waitFor is testserver.WaitFor, under the name the tests of this package use.
var waitFor = testserver.WaitFor
