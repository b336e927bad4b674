// Package redisbackend keeps fencelock locks in one Redis deployment: a single node, a
// Sentinel-managed master, or a Cluster.
//
// A lock named N is a hash under the key <prefix>{N}: {owner, token, count, h:<hold> per hold,
// and meta when the holder publishes it}, with the lock's TTL. Its fence counter is
// <prefix>{N}:fence; Obtain's waiters line up in <prefix>{N}:q and <prefix>{N}:q:e, and hear
// that a release handed them the lock on <prefix>{N}:g:<backend ID> (see AcquireQueued);
// releases with no one in line are announced on the channel <prefix>{N}:released.
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
// # Guarantees
//
// On one Redis deployment the lock is an efficiency lock: a failover that loses the last
// writes, an eviction, or a restart without persistence can let two holders overlap. Use the
// fencing token at the store when an overlap costs money; use Redlock or a consensus backend
// when the lock itself must survive a node loss.
package redisbackend

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/releasewatch"
)

// Client is the part of a go-redis client the backend uses: *redis.Client (a single node, or
// a Sentinel failover client from redis.NewFailoverClient) and *redis.ClusterClient satisfy
// it, and so does a wrapper of either.
type Client interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

// Backend is a fencelock.Backend over one Redis deployment. It is safe for concurrent use.
type Backend struct {
	c         Client
	prefix    string
	retention time.Duration
	replicas  int
	replicaTO time.Duration
	sharded   bool
	err       error // set when the configuration is unusable; every call returns it

	id           string // names this Backend's grant channels (see AcquireQueued)
	retentionArg any    // the fence retention in ms, boxed once
	lastTTL      atomic.Pointer[boxedTTL]
	watch        *releasewatch.Set
	pipe         pipeliner
	bg           background
	closed       atomic.Bool // set by Close: every call fails, the background work finishes
}

var (
	_ fencelock.Backend        = (*Backend)(nil)
	_ fencelock.ReleaseWatcher = (*Backend)(nil)
	_ fencelock.Queue          = (*Backend)(nil)
)

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
// fencelock.ErrUnavailable and the lock is released again, so that a failover cannot hand out
// the same lock, and repeat its fencing token, from a replica that never saw it. A timeout
// below 1ms is refused: WAIT counts in milliseconds, and WAIT n 0 waits forever.
// Default: 0, no waiting.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(b *Backend) { b.replicas, b.replicaTO = n, timeout }
}

// WithPipelining lets at most n acquire and release calls of the Backend go out on their own
// at once; calls that arrive while n are in flight wait, and go out together as one pipeline
// as soon as one of those returns. Many goroutines locking at once then share round trips,
// and client and server spend far less CPU per call (about 40% and 20% less in the benchmark
// of 32 goroutines, docs/PERFORMANCE.md), at the cost of a queued call waiting for a send to
// end. A call still queued when its context ends returns the context's error and was never
// sent; once in a batch, it waits for the batch's reply, which ends by the latest deadline in
// the batch. Calls made with WithReplicas are never batched. Default: 0, every call on its
// own.
func WithPipelining(n int) Option { return func(b *Backend) { b.pipe.max = n } }

// WithShardedPubSub chooses SPUBLISH/SSUBSCRIBE (Redis 7 sharded pub/sub) over
// PUBLISH/SUBSCRIBE for release notifications. Default: on for a *redis.ClusterClient, where a
// shard channel reaches only the shard of the lock, and off elsewhere, which works on any Redis
// version.
func WithShardedPubSub(on bool) Option { return func(b *Backend) { b.sharded = on } }

// New returns a Backend over c. A nil c or an unusable option gives a Backend whose every call
// fails with an error matching fencelock.ErrInvalid.
func New(c Client, opts ...Option) *Backend {
	b := &Backend{c: c, prefix: "fencelock:", retention: 24 * time.Hour, replicaTO: 100 * time.Millisecond}
	if _, ok := c.(*redis.ClusterClient); ok {
		b.sharded = true
	}
	for _, o := range opts {
		o(b)
	}
	switch {
	case c == nil || isNilPointer(c):
		b.err = fmt.Errorf("%w: nil redis client", fencelock.ErrInvalid)
	case strings.ContainsAny(b.prefix, "{}"):
		b.err = fmt.Errorf("%w: key prefix %q contains a brace, which would break the hash tag", fencelock.ErrInvalid, b.prefix)
	case b.retention <= 0:
		b.err = fmt.Errorf("%w: fence retention must be positive, got %v", fencelock.ErrInvalid, b.retention)
	case b.pipe.max < 0:
		b.err = fmt.Errorf("%w: pipelining %d: want 0 (off) or more", fencelock.ErrInvalid, b.pipe.max)
	case b.replicas < 0 || (b.replicas > 0 && b.replicaTO < time.Millisecond):
		// WAIT counts in milliseconds, and WAIT n 0 blocks until n replicas answer.
		b.err = fmt.Errorf("%w: replicas %d with timeout %v: want a timeout of 1ms or more", fencelock.ErrInvalid, b.replicas, b.replicaTO)
	}
	b.retentionArg = b.retention.Milliseconds()
	b.id = newID()
	b.watch = releasewatch.New(c, b.sharded)
	b.pipe.c = c
	return b
}

// newID returns 8 random bytes, base64url encoded.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func isNilPointer(c Client) bool {
	switch v := c.(type) {
	case *redis.Client:
		return v == nil
	case *redis.ClusterClient:
		return v == nil
	}
	return false
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
func (b *Backend) Key(name string) string { return b.prefix + "{" + name + "}" }

func (b *Backend) fenceKey(name string) string   { return b.Key(name) + ":fence" }
func (b *Backend) channelKey(name string) string { return b.Key(name) + ":released" }

// usable reports why name cannot be locked. A name that starts with '}' would make the hash tag
// of its keys empty, and Redis Cluster would then hash each key whole, into different slots.
func (b *Backend) usable(name string) error {
	if err := b.open(); err != nil {
		return err
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name", fencelock.ErrInvalid)
	case name[0] == '}':
		return fmt.Errorf("%w: lock name %q starts with '}', which would empty its Cluster hash tag", fencelock.ErrInvalid, name)
	}
	return nil
}

// Acquire implements fencelock.Backend.
func (b *Backend) Acquire(ctx context.Context, req fencelock.Request) (fencelock.Grant, error) {
	if err := b.usable(req.Name); err != nil {
		return fencelock.Grant{}, err
	}
	fenceKey := b.fenceKey(req.Name)
	keys := []string{fenceKey[:len(fenceKey)-len(":fence")], fenceKey} // one allocation for both
	args := []any{req.Owner, req.Hold, b.ttlArg(req.TTL), b.retentionArg, req.Meta}
	var reply []any
	var err error
	acked := -1
	if b.replicas > 0 {
		var v any
		if v, acked, err = b.replicated(ctx, acquireScript, acquireSrc, keys, args); err == nil {
			reply, _ = v.([]any)
		}
	} else {
		reply, err = b.pipe.run(ctx, acquireScript, keys, args...).Slice()
	}
	if err != nil {
		return fencelock.Grant{}, b.failed(req, err)
	}
	res, ok := int64s(reply)
	if !ok || len(reply) < 2 || (res[0] == 1 && len(reply) < 3) {
		return fencelock.Grant{}, fmt.Errorf("%w: unexpected acquire reply %v", fencelock.ErrUnavailable, reply)
	}
	if res[0] == 0 {
		return fencelock.Grant{}, &fencelock.HeldError{Name: req.Name, Remaining: time.Duration(res[1]) * time.Millisecond}
	}
	if acked >= 0 && acked < b.replicas {
		// Not handed out; the Client releases it, as after any acquisition that failed but may
		// have taken the lock.
		return fencelock.Grant{}, fmt.Errorf("%w: only %d of %d replicas acknowledged the lock within %v", fencelock.ErrUnavailable, acked, b.replicas, b.replicaTO)
	}
	return fencelock.Grant{Token: res[1], Count: int(res[2])}, nil
}

// replicated runs script and WAIT on one connection, in one round trip: WAIT counts the
// replicas that have the writes of its own connection.
func (b *Backend) replicated(ctx context.Context, script *redis.Script, src string, keys []string, args []any) (any, int, error) {
	type node interface {
		Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
		ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	}
	cc, cluster := b.c.(*redis.ClusterClient)
	// On a Cluster the pipeline goes to the key's master directly, past the cluster client,
	// which therefore never sees a MOVED reply: after a failover or a reshard it is told here
	// to reload its slot map, synchronously, and the call goes to the new master.
	master := func() (node, error) {
		if !cluster {
			return b.c, nil
		}
		return cc.MasterForKey(ctx, keys[0])
	}
	n, err := master()
	if err != nil {
		return nil, 0, err
	}
	loaded, moved := false, false
	for {
		var eval *redis.Cmd
		var wait *redis.Cmd
		_, _ = n.Pipelined(ctx, func(p redis.Pipeliner) error {
			eval = p.EvalSha(ctx, script.Hash(), keys, args...)
			wait = p.Do(ctx, "WAIT", b.replicas, b.replicaTO.Milliseconds())
			return nil
		})
		if err := eval.Err(); err != nil {
			switch {
			case !loaded && redis.HasErrorPrefix(err, "NOSCRIPT"):
				loaded = true
				if err := n.ScriptLoad(ctx, src).Err(); err != nil {
					return nil, 0, err
				}
				continue
			case cluster && !moved && redis.HasErrorPrefix(err, "MOVED"):
				moved = true
				// ForEachMaster loads the slot map afresh before it returns.
				if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
					return nil, 0, err
				}
				if n, err = master(); err != nil {
					return nil, 0, err
				}
				continue
			}
			return nil, 0, err
		}
		n, err := wait.Int64()
		if err != nil {
			// The script ran and may hold the lock; the caller's clean-up releases it.
			return nil, 0, &waitError{err: err}
		}
		return eval.Val(), int(n), nil
	}
}

// waitError is a WAIT that failed after the script it follows ran: the script may have taken
// the lock.
type waitError struct{ err error }

func (e *waitError) Error() string { return "WAIT after the script: " + e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// failed classifies the error of an acquisition. A WAIT that the server refused (a writable
// replica refuses it) is a configuration the caller must change, so the error matches
// fencelock.ErrInvalid, which tells the Client nothing was taken: the Backend releases what
// the script may have taken itself.
func (b *Backend) failed(req fencelock.Request, err error) error {
	var werr *waitError
	if errors.As(err, &werr) {
		b.undo(req)
		if _, refused := errors.AsType[redis.Error](err); refused {
			return fmt.Errorf("%w: WithReplicas: the server refused %w", fencelock.ErrInvalid, werr)
		}
	}
	return classify(err)
}

// Renew implements fencelock.Backend. The leases go out as one pipeline, which the Cluster
// client splits into one round trip per node.
func (b *Backend) Renew(ctx context.Context, leases []fencelock.Lease) []fencelock.Renewal {
	errs := make([]fencelock.Renewal, len(leases))
	for i, l := range leases {
		errs[i].Err = b.usable(l.Name)
	}
	if len(leases) == 1 {
		l := leases[0]
		if errs[0].Err == nil {
			errs[0].Err = renewResult(l.Name, renewScript.Run(ctx, b.c, []string{b.Key(l.Name)}, l.Owner, b.ttlArg(l.TTL), l.Token, setTTL(l)))
		}
		return errs
	}
	cmds := make([]*redis.Cmd, len(leases))
	_, _ = b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range leases {
			if errs[i].Err == nil {
				cmds[i] = renewScript.EvalSha(ctx, p, []string{b.Key(l.Name)}, l.Owner, b.ttlArg(l.TTL), l.Token, setTTL(l))
			}
		}
		return nil
	})
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			l := leases[i]
			cmd = renewScript.Run(ctx, b.c, []string{b.Key(l.Name)}, l.Owner, b.ttlArg(l.TTL), l.Token, setTTL(l))
		}
		errs[i].Err = renewResult(leases[i].Name, cmd)
	}
	return errs
}

// setTTL is renew.lua's ARGV[4] for l: the caller's holds when it sets the TTL, 0 to extend.
func setTTL(l fencelock.Lease) int {
	if l.Refresh {
		return max(l.Holds, 1)
	}
	return 0
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

func renewResult(name string, cmd *redis.Cmd) error {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return classify(err)
	case n == 0:
		return fmt.Errorf("%w: %q is no longer held by this owner in Redis", fencelock.ErrNotHeld, name)
	}
	return nil
}

// Release implements fencelock.Backend.
func (b *Backend) Release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	return b.release(ctx, lease, hold)
}

// release is Release for a usable name, also while the Backend closes.
func (b *Backend) release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	publish := "PUBLISH"
	if b.sharded {
		publish = "SPUBLISH"
	}
	n, err := b.pipe.run(ctx, releaseScript, b.queueKeys(lease.Name), lease.Owner, hold, publish, b.retentionArg).Int64()
	switch {
	case err != nil:
		return 0, classify(err)
	case n < 0:
		return 0, fmt.Errorf("%w: %q is not held by this owner in Redis", fencelock.ErrNotHeld, lease.Name)
	}
	return int(n), nil
}

// Inspect implements fencelock.Backend.
func (b *Backend) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.usable(name); err != nil {
		return fencelock.Info{}, err
	}
	v, err := inspectScript.Run(ctx, b.c, []string{b.Key(name), b.fenceKey(name)}).Slice()
	if err != nil {
		return fencelock.Info{}, classify(err)
	}
	info := fencelock.Info{Name: name}
	if len(v) < 5 {
		return info, fmt.Errorf("%w: unexpected inspect reply %v", fencelock.ErrUnavailable, v)
	}
	owner, _ := v[0].(string)
	count, _ := v[1].(int64)
	token, _ := v[2].(int64)
	pttl, _ := v[3].(int64)
	info.Held = owner != ""
	info.Owner, info.Count, info.Token = owner, int(count), token
	if pttl > 0 {
		info.Remaining = time.Duration(pttl) * time.Millisecond
	}
	if !info.Held {
		if s, ok := v[4].(string); ok {
			info.Token, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	if len(v) > 5 {
		info.Meta, _ = v[5].(string)
	}
	return info, nil
}

// Close ends the release subscriptions still open and waits for the Backend's clean-up in the
// background (taking waiters out of line, at most 2 s). Every call after Close fails with an
// error matching fencelock.ErrClosed. Close is only needed when a Backend is dropped while the
// program goes on; it is idempotent.
func (b *Backend) Close() error {
	b.closed.Store(true)
	b.bg.close()
	b.watch.Close()
	return nil
}

// transient are the Redis error replies that may pass: a failover, a reshard, a restart.
var transient = []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "MOVED", "ASK", "BUSY", "NOREPLICAS"}

// classify wraps err with the fencelock error that says what to do about it.
func classify(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		for _, p := range transient {
			if strings.HasPrefix(msg, p) {
				if p == "READONLY" {
					return fmt.Errorf("%w: the server is a read-only replica: %w", fencelock.ErrUnavailable, err)
				}
				return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
			}
		}
		if strings.Contains(msg, "WRONGTYPE") {
			return fmt.Errorf("%w: the lock's key holds another Redis type: %w", fencelock.ErrInvalid, err)
		}
		if strings.Contains(msg, "FENCELOCK") {
			return fmt.Errorf("%w: %w", fencelock.ErrInvalid, err)
		}
		return fmt.Errorf("%w: Redis refused: %w", fencelock.ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
}
