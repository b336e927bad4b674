package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// maxEntryLife bounds how long a waiter's place in line outlives its last renewal. A waiter
// that dies in line can be handed the lock within that time, which then waits out the lock's
// TTL as if a holder had died; a live waiter renews its place three times per entry life.
const maxEntryLife = 5 * time.Second

// AcquireQueued implements driver.Queue: a waiter takes a place in a line kept in Redis
// beside the lock, and the release of the last hold hands the lock to the first live waiter
// inside the same script, announcing the grant on a channel of the waiter's Backend alone
// (<prefix>{N}:g:<backend ID>). The waiter learns it holds the lock from that message: a
// hand-off costs no round trip after the release, and no other client hears of it.
//
// A place in line lives min(TTL, 5s) unless renewed; the waiter renews it a third of that
// apart. A release hands the lock over for that long too, and Grant.Validity says so; the
// Client's first renewal extends it to the TTL. A lock that expires rather than being released
// goes to the first live waiter at its next attempt, made when the holder's TTL runs out. One
// attempt (Acquire, TryObtain) ignores the line: it takes a free lock, and a lock is only free
// with waiters in line when its holder let it expire. The wait itself is lineWait's, shared
// with a semaphore's permits.
func (b *Backend) AcquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := b.usable(req.Name); err != nil {
		return driver.Grant{}, err
	}
	if req.Limit > 0 {
		return b.waitForPermit(ctx, req)
	}
	if strings.Contains(req.Hold, "@") {
		return driver.Grant{}, fmt.Errorf("%w: hold ID %q contains '@'", driver.ErrInvalid, req.Hold)
	}
	l := b.newLineWait(req, b.Key(req.Name)+":g:"+b.id)
	member := req.Hold + "@" + req.Owner
	l.w.Message = func(payload string) bool {
		// 'g <token> <hold id>@<owner>': a release handed the lock to that waiter of this client.
		rest, _ := strings.CutPrefix(payload, "g ")
		tok, who, _ := strings.Cut(rest, " ")
		if who != member {
			return false
		}
		l.handed(tok)
		return true
	}
	k := &lockLine{b: b, req: req, start: l.start, keys: b.queueKeys(req.Name)}
	k.args = []any{req.Owner, req.Hold, b.ttlArg(req.TTL), b.retentionArg, req.Meta, l.life.Milliseconds(), b.id, l.hand.Milliseconds(), b.form}
	return l.wait(ctx, k)
}

// lockLine is the lock's part of a wait in its line (lineKind).
type lockLine struct {
	b     *Backend
	req   driver.Request
	start time.Time
	keys  []string
	args  []any
}

func (k *lockLine) attempt(ctx context.Context, seen *attemptSeen) (*driver.Grant, time.Time, error) {
	return k.b.queueAttempt(ctx, k.req, k.keys, k.args, seen)
}

// finish ends a wait whose attempt sent at sent granted g or failed with err. An attempt that
// failed may have put the waiter in line.
func (k *lockLine) finish(ctx context.Context, g *driver.Grant, sent time.Time, err error) (driver.Grant, error) {
	if err != nil && (!errors.Is(err, driver.ErrInvalid) || driver.StoreMayHold(err)) {
		k.leave()
	}
	return k.b.queued(ctx, k.req, g, k.start, sent, err)
}

func (k *lockLine) handedOver(ctx context.Context, g driver.Grant, sent time.Time) (driver.Grant, error) {
	return k.b.queued(ctx, k.req, &g, k.start, sent, nil)
}

func (k *lockLine) leave() { k.b.leave(k.keys, k.req) }

// attemptSeen is what the latest attempt that found a waiter in line saw.
type attemptSeen struct {
	sent time.Time // when it was sent
	pttl int64     // the holder's PTTL in ms, -1 when an earlier waiter is next
	last int64     // the last token issued for the lock when it ran
}

// handover turns a hand-over to the waiter, announced with token, into a grant that lasts
// handed from the latest attempt's send — or returns nil when the hand-over is gone. The
// announcement travels apart from the replies, so it may be read after an attempt that ran
// later than the hand-over: an attempt that ran later saw token as issued already, and found
// the waiter in line again, so the hand-over had lapsed by then (a waiter that was paused).
// One that ran earlier was sent before the hand-over was made, so counting from its send is
// safe.
func (a *attemptSeen) handover(token int64, handed time.Duration) *driver.Grant {
	if token <= a.last {
		return nil
	}
	return &driver.Grant{Token: token, Count: 1, Validity: handed}
}

// waitFor returns how long a waiter waits for a message before its next attempt: it renews its
// place in line (of the given life) in time, and tries when the holder's TTL (pttl, in ms)
// ends, or soon when an earlier waiter is next for a free lock (pttl -1).
func waitFor(life time.Duration, pttl int64) time.Duration {
	next := life / 3
	if pttl < 0 {
		return min(next, 50*time.Millisecond+rand.N(20*time.Millisecond))
	}
	return min(next, time.Duration(pttl)*time.Millisecond+rand.N(5*time.Millisecond))
}

// queueAttempt runs the queue script once: a grant and when the attempt was sent, or nil with
// what the attempt saw recorded in seen.
func (b *Backend) queueAttempt(ctx context.Context, req driver.Request, keys []string, args []any, seen *attemptSeen) (*driver.Grant, time.Time, error) {
	sent := time.Now()
	reply, err := redisconn.Slice(b.pipe.run(ctx, queueScript, keys, args...))
	if err != nil {
		return nil, sent, redislayer.Classify(err)
	}
	res, ok := int64s(reply)
	if !ok || len(reply) < 3 {
		return nil, sent, fmt.Errorf("%w: unexpected queue reply %v", driver.ErrUnavailable, reply)
	}
	if res[0] == 0 {
		*seen = attemptSeen{sent: sent, pttl: res[1], last: res[2]}
		return nil, sent, nil
	}
	return &driver.Grant{Token: res[1], Count: int(res[2])}, sent, nil
}

// queued finishes a queued acquisition. sent is when the request was sent that the grant is
// known to follow: the attempt that made it, or for a hand-over the latest attempt that found
// the caller waiting. With WithReplicas, the grant is confirmed by a renewal that replicas must
// acknowledge, which they can only do once they have the grant too.
func (b *Backend) queued(ctx context.Context, req driver.Request, g *driver.Grant, start, sent time.Time, err error) (driver.Grant, error) {
	if err != nil {
		return driver.Grant{}, err
	}
	g.Elapsed = sent.Sub(start)
	if b.replicas > 0 {
		reply, acked, err := b.replicated(ctx, renewScript, []string{b.Key(req.Name)}, []any{req.Owner, b.ttlArg(req.TTL), g.Token, "0"})
		if err != nil {
			return driver.Grant{}, failed(err)
		}
		if n, _ := reply.(int64); n != 1 {
			return driver.Grant{}, fmt.Errorf("%w: %q was handed over but is no longer held", driver.ErrUnavailable, req.Name)
		}
		if err := b.unacked(acked, "lock"); err != nil {
			return driver.Grant{}, err
		}
		// That renewal, sent after sent, gave a handed-over lock its whole TTL.
		g.Validity = 0
	}
	return *g, nil
}

// leave takes the caller out of line, in the background: the caller's context may be what
// ended the wait, and the call returns by its deadline. Then it releases the caller's hold, in
// case a release handed the lock over before the caller left: once out of line no hand-over
// can reach it, so that order leaves no lock held for no one. A leave that fails leaves a
// place that lapses within min(TTL, 5s), like a dead waiter's.
func (b *Backend) leave(keys []string, req driver.Request) {
	b.bg.later(func(ctx context.Context) {
		if _, err := b.c.Eval(ctx, leaveScript, keys[2:], req.Owner, req.Hold); err == nil {
			_, _ = b.release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}, req.Hold)
		}
	})
}

// queueKeys returns the lock, its fence counter, the line and its entries: <prefix>{N},
// <prefix>{N}:fence, <prefix>{N}:q and <prefix>{N}:q:e, from two allocations — none for a name
// the Backend was asked about lately (b.keys). The slice is shared: callers read it, and cap
// what they slice of it before anything could append.
func (b *Backend) queueKeys(name string) []string {
	if k, ok := b.keys.Get(name); ok {
		return k.keys[:]
	}
	lock := len(b.prefix) + len(name) + 2
	all := b.prefix + "{" + name + "}:q:e" + b.prefix + "{" + name + "}:fence"
	entries := all[:lock+4]
	k := &nameKeys{name: name, keys: [4]string{entries[:lock], all[lock+4:], entries[:lock+2], entries}}
	b.keys.Put(k)
	return k.keys[:]
}

// nameKeys is a name's queueKeys, as b.keys keeps them.
type nameKeys struct {
	name string
	keys [4]string
}

func (k *nameKeys) Key() string { return k.name }

var _ driver.LineLister = (*Backend)(nil)

// Line implements driver.LineLister: one script reads the line and the waiters' entries,
// and leaves out those whose place lapsed.
func (b *Backend) Line(ctx context.Context, name string) ([]driver.Info, error) {
	if err := b.usable(name); err != nil {
		return nil, err
	}
	keys := b.queueKeys(name)
	reply, err := redisconn.Slice(b.pipe.run(ctx, lineScript, keys[2:4]))
	if err != nil {
		return nil, redislayer.Classify(err)
	}
	var out []driver.Info
	seen := make(map[string]bool)
	for i := 0; i+1 < len(reply); i += 2 {
		member, _ := reply[i].(string)
		meta, _ := reply[i+1].(string)
		_, owner, ok := strings.Cut(member, "@")
		if !ok || seen[owner] {
			continue
		}
		seen[owner] = true
		out = append(out, driver.Info{Name: name, Owner: owner, Meta: meta})
	}
	return out, nil
}
