// Package redisbackend keeps fencelock locks in one Redis deployment: a single node, a
// Sentinel-managed master, or a Cluster.
//
// A lock named N is the key <prefix>{N}, with the lock's TTL: in the common case of one
// holder's one hold with no metadata and no line, a plain key '<token> <hold> <owner>', one
// SET; else a hash {owner, token, count, h:<hold> per hold, meta when the holder publishes it,
// q once a waiter joined its line}, into which the plain key turns when the lock needs it
// (lock.lua; WithPlainLocks; README, "Upgrading with locks held"). Its fence counter is
// <prefix>{N}:fence; Obtain's waiters line up in <prefix>{N}:q and <prefix>{N}:q:e, and hear
// that a release handed them the lock on <prefix>{N}:g:<backend ID> (see AcquireQueued);
// releases with no one in line are announced on the channel <prefix>{N}:released to whoever
// listens there.
// The braces are a Cluster hash tag, so all of them live in one slot and every operation is one
// script, one round trip.
//
// # Fencing tokens
//
// A token is max(counter+1, server time in µs). The counter key outlives each acquisition by
// the fence retention (default 24h) and then expires, so fencing leaves behind at most one
// small key per lock name used within the retention. After it expires, the server clock
// carries the order: every earlier token was at most the server time when it was issued plus
// the handful of acquisitions made within one microsecond. Tokens therefore keep increasing as
// long as the server's clock does not step back by more than the retention, and across a
// failover as long as the servers' clocks agree to within the time the failover takes. A
// failover can still lose the lock itself — replication is asynchronous — which is what
// WithReplicas narrows and fencing at the store catches.
//
// # Loss by push
//
// With a go-redis *redis.Client (single node or Sentinel) or *redis.ClusterClient, the Backend
// is a driver.LossWatcher: it watches each hold the watchdog renews through CLIENT TRACKING
// (Redis 6 and later, Valkey) on a client of its own, made from the caller's options with
// RESP2, and ends the hold within milliseconds when its key is deleted, overwritten, flushed,
// evicted or lost to a restart, instead of at the next renewal. Per master it keeps one
// subscription to __redis__:invalidate and one reading connection, while anything is
// watched and for 2 s after (Close ends them); each renewal makes the server push one invalidation and the Backend read the key
// once more. Other clients, and servers that refuse CLIENT TRACKING, fall back to the renewals.
//
// # Guarantees
//
// On one Redis deployment the lock is an efficiency lock: a failover that loses the last
// writes, an eviction, or a restart without persistence can let two holders overlap. Use the
// fencing token at the store when an overlap costs money; use Redlock or a consensus backend
// when the lock itself must survive a node loss.
package redisbackend

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/recent"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/redisconn"
)

// Client is what New takes: a go-redis v9 client (*redis.Client for a single node or a Sentinel
// failover client, *redis.ClusterClient, redis.UniversalClient, or anything with the methods
// of redisconn.GoRedisClient), or a redisconn.Conn from an adapter such as rueidisconn or
// valkeyconn. Go has no type for "one of these", so New checks it: anything else gives a
// Backend whose every call fails with an error matching driver.ErrInvalid.
type Client = redisconn.Client

// Backend is a driver.Backend over one Redis deployment. It is safe for concurrent use.
type Backend struct {
	c         redisconn.Conn
	prefix    string
	retention time.Duration
	replicas  int
	replicaTO time.Duration
	sharded   *bool  // WithShardedPubSub; nil: the default for the deployment
	form      string // WithPlainLocks: "hash" when off, the scripts' argument
	err       error  // set when the configuration is unusable; every call returns it

	id           string       // names this Backend's grant channels (see AcquireQueued)
	retentionArg any          // the fence retention in ms, boxed once
	announce     any          // how the scripts off the cycle announce a release, boxed once
	cycle        cycleScripts // the cycle's scripts, with the settings in their source
	lastTTL      atomic.Pointer[boxedTTL]
	keys         recent.Cache[*nameKeys] // queueKeys of the names used lately
	watch        *releasewatch.Set
	pipe         pipeliner
	bg           background
	loss         lossWatch
	closed       atomic.Bool // set by Close: every call fails, the background work finishes
}

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.ReleaseWatcher = (*Backend)(nil)
	_ driver.Queue          = (*Backend)(nil)
	_ driver.Expirer        = (*Backend)(nil)
)

// ExpiresByTTL implements driver.Expirer: the store lets a lock go when its TTL runs out.
func (b *Backend) ExpiresByTTL() bool { return true }

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every key. It must not contain '{' or '}'. Default:
// "fencelock:".
func WithPrefix(p string) Option { return func(b *Backend) { b.prefix = p } }

// WithFenceRetention sets how long a lock's fence counter outlives its last acquisition.
// Longer protects token order against a larger backward step of the server clock; shorter
// leaves fewer keys behind. Default: 24h.
func WithFenceRetention(d time.Duration) Option { return func(b *Backend) { b.retention = d } }

// WithReplicas makes every acquisition wait until n replicas acknowledged it (WAIT n timeout).
// When fewer answer within timeout, the acquisition fails with an error matching
// driver.ErrUnavailable and the lock is released again, so that a failover cannot hand out
// the same lock, and repeat its fencing token, from a replica that never saw it. A timeout
// below 1ms is refused: WAIT counts in milliseconds, and WAIT n 0 waits forever.
// Default: 0, no waiting.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(b *Backend) { b.replicas, b.replicaTO = n, timeout }
}

// WithPipelining lets at most n acquire and release calls of the Backend go out on their own
// at once; calls that arrive while n are in flight wait, and go out together as one pipeline
// as soon as one of those returns. Many goroutines locking at once then share round trips,
// and client and server spend far less CPU per call (docs/PERFORMANCE.md, throughput), at the
// cost of a queued call waiting for a send to end. A lone caller, or a few, never wait: the
// batching starts only when more than n calls are in flight, which makes it adapt to the
// load by itself. A call returns by its own context's end wherever it is: still queued, with
// the context's error and never sent; in a batch on its way, with the context's error and its
// outcome unknown, as for a call sent alone. Calls made with WithReplicas are never batched.
// 0 sends every call on its own. Default: 8, the best setting for 32 goroutines in the
// benchmark.
func WithPipelining(n int) Option { return func(b *Backend) { b.pipe.max = n } }

// WithLossWatch turns loss by push (see the package doc) on or off. Each lock it watches
// costs, per renewal, one invalidation the server pushes and one read of the key, about
// 7 µs of client CPU and one command on the server (docs/PERFORMANCE.md, watchdog): a client
// holding thousands of locks at once may prefer to learn of losses at its renewals. Default:
// on where the client can track keys.
func WithLossWatch(on bool) Option { return func(b *Backend) { b.loss.off = !on } }

// WithPlainLocks lets the Backend write a lock with one holder's one hold, no metadata and no
// waiter in line as a plain string key, one SET, rather than a hash: the common case costs the
// server less. Off, every lock is written as a hash, as versions before plain keys did (see
// the README, "Upgrading with locks held"): set it off on every instance of a rolling upgrade
// from such a version, whose scripts fail on a plain key, and on again once none of them
// runs. Either way the Backend reads both forms. Default: on.
func WithPlainLocks(on bool) Option {
	return func(b *Backend) {
		b.form = ""
		if !on {
			b.form = "hash"
		}
	}
}

// WithShardedPubSub chooses SPUBLISH/SSUBSCRIBE (Redis 7 sharded pub/sub) over
// PUBLISH/SUBSCRIBE for release notifications. Default: on for a Cluster, where a
// shard channel reaches only the shard of the lock, and off elsewhere, which works on any Redis
// version.
func WithShardedPubSub(on bool) Option { return func(b *Backend) { b.sharded = &on } }

// New returns a Backend over c (see Client). A c that is not a Redis client, or an unusable
// option, gives a Backend whose every call fails with an error matching driver.ErrInvalid.
func New(c Client, opts ...Option) *Backend {
	b := &Backend{prefix: "fencelock:", retention: 24 * time.Hour, replicaTO: 100 * time.Millisecond}
	b.pipe.max = defaultPipelining
	for _, o := range opts {
		o(b)
	}
	b.c, b.err = redislayer.Open(c)
	if b.err == nil {
		b.err = b.configure()
	}
	sharded := false
	if b.c != nil {
		sharded = b.c.Cluster()
	}
	if b.sharded != nil {
		sharded = *b.sharded
	}
	how := redislayer.Announce(b.c != nil && b.c.Cluster(), sharded)
	b.announce = how
	b.retentionArg = b.retention.Milliseconds()
	b.cycle = newCycleScripts(how, b.retention.Milliseconds(), b.form)
	b.id = newID()
	b.watch = releasewatch.New(b.c, sharded)
	b.pipe.c = b.c
	return b
}

// defaultPipelining is WithPipelining's default. A lone caller never waits for a slot, and
// each batched call returns by its own deadline (the nemesis seed 935547943, whose calls came
// back 800 ms late while a batch kept them to its latest deadline, now passes).
const defaultPipelining = 8

// configure says why the options cannot be used.
func (b *Backend) configure() error {
	if err := redislayer.CheckPrefix(b.prefix); err != nil {
		return err
	}
	switch {
	case b.retention <= 0:
		return fmt.Errorf("%w: fence retention must be positive, got %v", driver.ErrInvalid, b.retention)
	case b.pipe.max < 0:
		return fmt.Errorf("%w: pipelining %d: want 0 (off) or more", driver.ErrInvalid, b.pipe.max)
	case b.replicas < 0 || (b.replicas > 0 && b.replicaTO < time.Millisecond):
		// WAIT counts in milliseconds, and WAIT n 0 blocks until n replicas answer.
		return fmt.Errorf("%w: replicas %d with timeout %v: want a timeout of 1ms or more", driver.ErrInvalid, b.replicas, b.replicaTO)
	}
	return nil
}

// newID returns 8 random bytes, base64url encoded.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// open reports why the Backend cannot be used at all: an unusable option, or Close.
func (b *Backend) open() error {
	if b.err != nil {
		return b.err
	}
	if b.closed.Load() {
		return errClosed
	}
	return nil
}

// Key returns the key of the lock name.
func (b *Backend) Key(name string) string { return redislayer.Key(b.prefix, name) }

func (b *Backend) fenceKey(name string) string   { return b.Key(name) + ":fence" }
func (b *Backend) channelKey(name string) string { return b.Key(name) + ":released" }

// usable reports why name cannot be locked.
func (b *Backend) usable(name string) error {
	if err := b.open(); err != nil {
		return err
	}
	return redislayer.CheckName(name)
}

// int64s reads a reply of at most three integers without allocating.
func int64s(reply []any) ([3]int64, bool) {
	var out [3]int64
	if len(reply) > len(out) {
		return out, false
	}
	for i, v := range reply {
		n, ok := v.(int64)
		if !ok {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// ttlArg returns ttl in milliseconds as a script argument. Boxing an int64 allocates, and most
// programs use one or two TTLs, so the last one is kept boxed.
func (b *Backend) ttlArg(ttl time.Duration) any {
	if last := b.lastTTL.Load(); last != nil && last.ttl == ttl {
		return last.arg
	}
	arg := &boxedTTL{ttl: ttl, arg: ttl.Milliseconds()}
	b.lastTTL.Store(arg)
	return arg.arg
}

type boxedTTL struct {
	ttl time.Duration
	arg any
}

// Close ends the release subscriptions still open and waits for the Backend's clean-up in the
// background (taking waiters out of line, at most 2 s). Every call after Close fails with an
// error matching driver.ErrClosed. Close is only needed when a Backend is dropped while the
// program goes on; it is idempotent.
func (b *Backend) Close() error {
	b.closed.Store(true)
	b.loss.wake()
	b.bg.close()
	b.pipe.wait()
	b.watch.Close()
	return nil
}
