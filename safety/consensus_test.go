package safety

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// etcdTTL is the shortest lease etcd grants with etcdtest's election timeout, rounded up to the
// whole seconds a lease has; at the default 1 s election timeout it would be 2 s.
const etcdTTL = time.Second

// Scenario 11, etcd, first half: the leader of a 3-member cluster is killed and restarted while
// several clients obtain and release one lock in a loop, each client through proxies of its
// own. Every grant that arrives still valid is checked against every earlier one: no other
// holder may still be valid (a double grant), and its revision token must be above every
// token granted before it (a token violation); its write to a fenced store must go through.
func TestEtcdLeaderRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3})
	restarts := 2
	if full {
		restarts = 20
	}
	h := &holders{name: "leader-restart", holding: make(map[*fencelock.Lock]struct{}), seen: make(map[int64]bool)}
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }() // before the cleanups close the clients
	const workers = 3
	for range workers {
		c := newEtcdHolder(t, cluster)
		wg.Go(func() { h.loop(t, loopCtx, c) })
	}

	// progress waits until the workers have made n more checked grants.
	progress := func(what string, n int) {
		t.Helper()
		from := h.checked()
		deadline := time.Now().Add(time.Minute)
		for h.checked() < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d grants in a minute, want %d (obtain errors: %v)", what, h.checked()-from, n, h.errors())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	progress("before the first kill", 10)
	for i := range restarts {
		leader, err := cluster.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leader.Kill()
		next, err := cluster.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if next == leader {
			t.Fatalf("restart %d: the killed member %s still leads", i, leader.Name)
		}
		progress("with the leader down", 10)
		if err := leader.Restart(); err != nil {
			t.Fatal(err)
		}
		progress("after the restart", 10)
	}
	stop()
	wg.Wait()

	r := h.result()
	t.Logf("%d leader restarts: %+v", restarts, r)
	record(outcome{Scenario: 11, Title: "etcd leader killed and restarted under load", Backend: "etcd (3 members)",
		Setting: fmt.Sprintf("%d clients behind proxies, TTL %v, fenced store", workers, etcdTTL), Rounds: r.Checked, Unit: "acquisitions",
		DoubleGrants: r.DoubleGrants,
		Note: fmt.Sprintf("%d leader kills and restarts; %d token violations; %d grants already lost on arrival, %d lost while held; %d failed obtains, %d failed releases (the backend retried them)",
			restarts, r.TokenViolations, r.LateGrants, r.LostHolds, r.ObtainErrors, r.ReleaseErrors)})
	if r.DoubleGrants != 0 || r.TokenViolations != 0 {
		t.Fatalf("%d double grants, %d token violations", r.DoubleGrants, r.TokenViolations)
	}
}

// holders checks the grants of one lock name made by several clients.
type holders struct {
	name  string
	store fence.Memory

	mu      sync.Mutex // guards the fields below
	holding map[*fencelock.Lock]struct{}
	seen    map[int64]bool
	newest  int64
	res     holderCounts
	errs    map[string]int
}

type holderCounts struct {
	Checked         int // grants still valid on arrival, checked against the others
	DoubleGrants    int // another holder was still valid when a grant was checked
	TokenViolations int // a token not above every earlier one, or refused by the fenced store
	LateGrants      int // grants that were no longer valid when Obtain returned them
	LostHolds       int // holds that ended before their holder released them
	ObtainErrors    int
	ReleaseErrors   int // releases that failed other than with ErrNotHeld
}

func (h *holders) checked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.res.Checked
}

func (h *holders) result() holderCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.res
}

func (h *holders) errors() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.errs)
}

// loop obtains, checks, holds briefly and releases the lock until ctx ends.
//
// A worker whose acquisition or release failed restarts, as a process would: it closes its
// Backend, whose lease goes with it. Without that, a key whose release failed (or whose
// acquisition's outcome was lost and whose cleanup failed) stays in the queue for as long as
// the Backend keeps its lease alive, which is for ever, and every other worker waits behind it.
func (h *holders) loop(t *testing.T, ctx context.Context, c *etcdHolder) {
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lock, err := c.locker.Obtain(octx, h.name, fencelock.WithTTL(etcdTTL))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, fencelock.ErrNotObtained) {
				t.Errorf("obtain: %v", err)
				return
			}
			h.failed("obtain", err)
			continue
		}
		h.enter(lock)
		time.Sleep(10 * time.Millisecond)
		h.leave(lock)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = lock.Release(rctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, fencelock.ErrNotHeld):
			// Lost while held and gone from etcd: its successor is unharmed.
		default:
			// The Backend retries the release until it is done.
			h.failed("release", err)
		}
	}
}

func (h *holders) failed(what string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs == nil {
		h.errs = make(map[string]int)
	}
	h.errs[what+": "+err.Error()]++
	if what == "release" {
		h.res.ReleaseErrors++
	} else {
		h.res.ObtainErrors++
	}
}

// enter checks a new grant against every earlier one. Each holder registered before was granted
// before now; had this one been granted before it, this one's key, still valid now, would have
// existed at that grant, and both would have held at once. So a grant still valid on arrival
// must carry a token above every registered one, and no registered holder may still be valid.
func (h *holders) enter(l *fencelock.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l.Valid() != nil {
		h.res.LateGrants++
		return
	}
	for other := range h.holding {
		if other.Valid() == nil {
			h.res.DoubleGrants++
		}
	}
	tok := l.Token()
	if h.seen[tok] || tok <= h.newest {
		h.res.TokenViolations++
	}
	h.seen[tok] = true
	h.newest = max(h.newest, tok)
	if err := h.store.Check(h.name, tok); err != nil {
		h.res.TokenViolations++
	}
	h.holding[l] = struct{}{}
	h.res.Checked++
}

func (h *holders) leave(l *fencelock.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.holding[l]; !ok {
		return
	}
	delete(h.holding, l)
	if l.Valid() != nil {
		h.res.LostHolds++
	}
}

// etcdHolder is one client process of an etcd cluster, reaching each member through a proxy
// of its own, so that it can be partitioned alone.
type etcdHolder struct {
	proxies []*testserver.Proxy
	cli     *clientv3.Client
	backend *etcdbackend.Backend
	locker  *fencelock.Client
}

func newEtcdHolder(t *testing.T, cluster *etcdtest.Cluster) *etcdHolder {
	t.Helper()
	h := &etcdHolder{}
	var addrs []string
	for _, m := range cluster.Members {
		p := testserver.StartProxy(t, m.Addr)
		h.proxies = append(h.proxies, p)
		addrs = append(addrs, p.Addr)
	}
	h.cli = cluster.ClientOf(t, addrs...)
	h.backend = etcdbackend.New(h.cli)
	h.locker = fencelock.New(h.backend)
	t.Cleanup(h.close)
	return h
}

func (h *etcdHolder) partition() {
	for _, p := range h.proxies {
		p.Blackhole()
	}
}

func (h *etcdHolder) heal() {
	for _, p := range h.proxies {
		p.Restore()
	}
}

func (h *etcdHolder) close() {
	_ = h.locker.Close()
	_ = h.backend.Close()
	_ = h.cli.Close()
	for _, p := range h.proxies {
		_ = p.Close()
	}
}

// guardedPut writes value to key in one transaction guarded by lock, and also writes marker,
// so that whether it committed can be read from etcd whatever its client heard.
func (h *etcdHolder) guardedPut(ctx context.Context, lock *fencelock.Lock, key, value, marker string) (bool, error) {
	resp, err := h.cli.Txn(ctx).If(h.backend.Guard(lock)).Then(clientv3.OpPut(key, value), clientv3.OpPut(marker, "")).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Scenario 11, etcd, second half: a holder's client is partitioned from all three members
// (its proxies blackholed) until its lease expires, another client obtains the lock, and the
// partition heals. The old holder's writes guarded by its lock — one sent just after the
// partition began and delivered when it healed, one sent after — must not commit, and its
// token must be refused by a fenced store.
func TestEtcdPartitionedHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3})
	admin := cluster.Client(t)
	rounds := 3
	if full {
		rounds = 20
	}
	var doubleGrants, lateWrites, answeredRefused, committed, storeRefused, storeAccepted int
	for i := range rounds {
		name := "partition-" + strconv.Itoa(i)
		data, markers := "/safety/partition/"+name, "/safety/partition-markers/"+name+"/"
		a, b := newEtcdHolder(t, cluster), newEtcdHolder(t, cluster)
		var store fence.Memory

		lockA, err := a.locker.Obtain(ctx, name, fencelock.WithTTL(etcdTTL))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Check(name, lockA.Token()); err != nil {
			t.Fatal(err)
		}
		if ok, err := a.guardedPut(ctx, lockA, data, "a", markers+"a"); err != nil || !ok {
			t.Fatalf("round %d: A's guarded write while it holds the lock: committed %v, %v", i, ok, err)
		}
		if i == 0 {
			// The lease is as short as the test thinks: the server did not extend it to a minimum.
			kv, err := admin.Get(ctx, a.backend.Key(name, lockA.Owner()))
			if err != nil || len(kv.Kvs) != 1 {
				t.Fatalf("A's key: %v %v", kv, err)
			}
			ttl, err := admin.TimeToLive(ctx, clientv3.LeaseID(kv.Kvs[0].Lease))
			if err != nil || time.Duration(ttl.GrantedTTL)*time.Second != etcdTTL {
				t.Fatalf("A's lease: %+v %v, want a TTL of %v", ttl, err, etcdTTL)
			}
		}

		a.partition()
		type answer struct {
			ok  bool
			err error
		}
		inFlight := make(chan answer, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			ok, err := a.guardedPut(wctx, lockA, data, "a, in flight", markers+"a-in-flight")
			inFlight <- answer{ok, err}
		}()
		// B waits in line from the start of the partition, to take the lock the moment etcd
		// lets it go.
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		lockB, err := b.locker.Obtain(octx, name, fencelock.WithTTL(etcdTTL))
		ocancel()
		if err != nil {
			t.Fatalf("round %d: B: %v", i, err)
		}
		switch err := lockA.Context().Err(); {
		case err == nil:
			doubleGrants++
			t.Errorf("round %d: B holds the lock while A's is still valid", i)
		case !errors.Is(err, fencelock.ErrLost):
			t.Fatalf("round %d: A's lock ended with %v, want ErrLost", i, err)
		}
		if lockB.Token() <= lockA.Token() {
			t.Fatalf("round %d: B's token %d is not above A's %d", i, lockB.Token(), lockA.Token())
		}
		// The fault happened: the server expired A's lease and deleted its key.
		if resp, err := admin.Get(ctx, a.backend.Key(name, lockA.Owner()), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Fatalf("round %d: A's key while B holds the lock: count %v, %v", i, resp, err)
		}
		if err := store.Check(name, lockB.Token()); err != nil {
			t.Fatalf("round %d: B's fenced write: %v", i, err)
		}
		if ok, err := b.guardedPut(ctx, lockB, data, "b", markers+"b"); err != nil || !ok {
			t.Fatalf("round %d: B's guarded write: committed %v, %v", i, ok, err)
		}

		a.heal()
		var late answer
		select {
		case late = <-inFlight:
		case <-time.After(90 * time.Second):
			t.Fatalf("round %d: A's in-flight write unanswered 90s after the heal", i)
		}
		after := answer{}
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		after.ok, after.err = a.guardedPut(wctx, lockA, data, "a, after the heal", markers+"a-after-heal")
		wcancel()
		if after.err != nil {
			t.Fatalf("round %d: A's write after the heal got no answer: %v", i, after.err)
		}
		for _, w := range []answer{late, after} {
			lateWrites++
			if w.err == nil && !w.ok {
				answeredRefused++
			}
		}
		switch err := store.Check(name, lockA.Token()); {
		case err == nil:
			storeAccepted++
		case errors.Is(err, fence.ErrStale):
			storeRefused++
		default:
			t.Fatal(err)
		}

		// What committed is read from etcd, not taken from A's answers.
		resp, err := admin.Get(ctx, markers, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); k == markers+"a-in-flight" || k == markers+"a-after-heal" {
				committed++
				t.Errorf("round %d: A's guarded write %s committed after its lease was lost", i, k)
			}
		}
		if v, err := admin.Get(ctx, data); err != nil || len(v.Kvs) != 1 || string(v.Kvs[0].Value) != "b" {
			t.Errorf("round %d: the data after the heal: %v %v, want B's", i, v, err)
		}
		t.Logf("round %d: A token %d, B token %d; A's in-flight write: committed %v, %v", i, lockA.Token(), lockB.Token(), late.ok, late.err)
		_ = lockB.Release(ctx)
		a.close()
		b.close()
	}
	t.Logf("%d rounds: %d late guarded writes, %d refused by the guard with an answer, %d committed; fenced store refused %d, accepted %d",
		rounds, lateWrites, answeredRefused, committed, storeRefused, storeAccepted)
	record(outcome{Scenario: 11, Title: "etcd holder partitioned past its lease, then healed", Backend: "etcd (3 members)",
		Setting: fmt.Sprintf("proxies blackholed, TTL %v, Guard txn + fenced store", etcdTTL), Rounds: rounds, Unit: "rounds",
		DoubleGrants: doubleGrants, StaleRefused: lateWrites - committed + storeRefused, StaleAccepted: committed + storeAccepted,
		Note: fmt.Sprintf("%d guarded txns after the loss (one in flight across the heal, one after per round): %d committed, %d answered not committed; fenced store refused %d of %d",
			lateWrites, committed, answeredRefused, storeRefused, rounds)})
	if doubleGrants != 0 || committed != 0 || storeAccepted != 0 {
		t.Fatalf("%d double grants, %d guarded writes committed after the loss, %d stale tokens accepted", doubleGrants, committed, storeAccepted)
	}
}

// zkSession is the shortest session timeout the harness's server grants.
const zkSession = zktest.MinSessionTimeout

// Scenario 11, ZooKeeper: a holder's connection is cut until the server expires its session,
// another client obtains the lock, and the connection heals. The old holder's context must
// have ended with ErrLost by the time the other holds the lock, and its token must be refused
// by a fenced store.
func TestZooKeeperSessionExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv := zktest.Start(t, zktest.Options{})
	rounds := 3
	if full {
		rounds = 20
	}
	var doubleGrants, lostWithErrLost, storeRefused, storeAccepted int
	for i := range rounds {
		name := "expiry-" + strconv.Itoa(i)
		var link zktest.Link
		connA := zkConnect(t, srv.Addr, link.Dial)
		a := fencelock.New(zkbackend.New(connA, zkbackend.WithSessionTimeout(zkSession)), fencelock.WithDefaults(fencelock.WithTTL(zkSession)))
		connB := zkConnect(t, srv.Addr, nil)
		b := fencelock.New(zkbackend.New(connB, zkbackend.WithSessionTimeout(zkSession)), fencelock.WithDefaults(fencelock.WithTTL(zkSession)))
		var store fence.Memory

		lockA, err := a.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Check(name, lockA.Token()); err != nil {
			t.Fatal(err)
		}
		session := connA.SessionID()
		link.Cut()
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		lockB, err := b.Obtain(octx, name)
		ocancel()
		if err != nil {
			t.Fatalf("round %d: B: %v", i, err)
		}
		switch err := lockA.Context().Err(); {
		case err == nil:
			doubleGrants++
			t.Errorf("round %d: B holds the lock while A's is still valid", i)
		case errors.Is(err, fencelock.ErrLost):
			lostWithErrLost++
		default:
			t.Errorf("round %d: A's lock ended with %v, want ErrLost", i, err)
		}
		if lockB.Token() <= lockA.Token() {
			t.Fatalf("round %d: B's token %d is not above A's %d", i, lockB.Token(), lockA.Token())
		}
		if err := store.Check(name, lockB.Token()); err != nil {
			t.Fatalf("round %d: B's fenced write: %v", i, err)
		}

		link.Restore()
		// The fault happened: back on the server, A is told its session expired and gets a new one.
		deadline := time.Now().Add(30 * time.Second)
		for connA.State() != zk.StateHasSession || connA.SessionID() == session {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: A has no new session 30s after the heal (state %v)", i, connA.State())
			}
			time.Sleep(10 * time.Millisecond)
		}
		switch err := store.Check(name, lockA.Token()); {
		case err == nil:
			storeAccepted++
		case errors.Is(err, fence.ErrStale):
			storeRefused++
		default:
			t.Fatal(err)
		}
		if err := lockA.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
			t.Errorf("round %d: A's release after the expiry: %v, want ErrNotHeld", i, err)
		}
		if info, err := b.Inspect(ctx, name); err != nil || info.Token != lockB.Token() {
			t.Errorf("round %d: B's lock after A's release: %+v %v", i, info, err)
		}
		t.Logf("round %d: A token %d, B token %d", i, lockA.Token(), lockB.Token())
		_ = lockB.Release(ctx)
		_ = a.Close()
		_ = b.Close()
		connA.Close()
		connB.Close()
	}
	t.Logf("%d rounds: A's lock ended with ErrLost %d times; fenced store refused %d, accepted %d", rounds, lostWithErrLost, storeRefused, storeAccepted)
	record(outcome{Scenario: 11, Title: "ZooKeeper holder cut off until its session expired, then healed", Backend: "zookeeper (standalone)",
		Setting: fmt.Sprintf("session timeout %v, fenced store", zkSession), Rounds: rounds, Unit: "rounds",
		DoubleGrants: doubleGrants, StaleRefused: storeRefused, StaleAccepted: storeAccepted,
		Note: fmt.Sprintf("old holder's context ended with ErrLost before the new grant in %d of %d", lostWithErrLost, rounds)})
	if doubleGrants != 0 || lostWithErrLost != rounds || storeAccepted != 0 {
		t.Fatalf("%d double grants, ErrLost in %d of %d rounds, %d stale tokens accepted", doubleGrants, lostWithErrLost, rounds, storeAccepted)
	}
}

type quietZKLogger struct{}

func (quietZKLogger) Printf(string, ...any) {}

// zkConnect connects to addr through dialer (a plain dial when nil) and waits for the session.
func zkConnect(t *testing.T, addr string, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect([]string{addr}, zkSession, zk.WithLogger(quietZKLogger{}), zk.WithDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.Now().Add(30 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("no ZooKeeper session after 30s (state %v)", conn.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn
}
