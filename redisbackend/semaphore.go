package redisbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// A semaphore lives in keys of its own beside the lock of the same name, in the same hash slot
// (see sem.lua): <prefix>{N}:s (the permits), :s:x (their expiries), :s:f (the fence counter),
// :s:q and :s:qt (the line). Waiters wait first come, first served in the line, woken by a
// message on <prefix>{N}:s:released when a permit is released; a permit whose holder died
// frees when its expiry passes, and the first waiter in line takes it at its next attempt,
// made by then. A waiter's place lapses min(TTL, 5s) after its last attempt, as in a lock's
// line.

// semSuffixes are what a semaphore's keys add to the lock key of its name: its permits,
// expiries, fence counter, line and places.
var semSuffixes = [...]string{":s", ":s:x", ":s:f", ":s:q", ":s:qt"}

// semKeys returns a semaphore's permits, expiries, fence counter, line and places.
func (b *Backend) semKeys(name string) []string {
	key := b.Key(name)
	keys := make([]string, len(semSuffixes))
	for i, s := range semSuffixes {
		keys[i] = key + s
	}
	return keys
}

// InspectSemaphore implements driver.Semaphores.
func (b *Backend) InspectSemaphore(ctx context.Context, name string) (driver.SemaphoreInfo, error) {
	if err := b.usable(name); err != nil {
		return driver.SemaphoreInfo{}, err
	}
	v, err := redisconn.Slice(b.c.Eval(ctx, semInspectScript, b.semKeys(name)))
	if err != nil {
		return driver.SemaphoreInfo{}, redislayer.Classify(err)
	}
	info := driver.SemaphoreInfo{Name: name}
	if len(v) < 3 || (len(v)-3)%3 != 0 {
		return info, fmt.Errorf("%w: unexpected semaphore inspect reply %v", driver.ErrUnavailable, v)
	}
	limit, _ := v[0].(int64)
	last, _ := v[1].(string)
	waiting, _ := v[2].(int64)
	info.Limit, info.Waiting = int(limit), int(waiting)
	info.Token, _ = strconv.ParseInt(last, 10, 64)
	for i := 3; i < len(v); i += 3 {
		owner, _ := v[i].(string)
		rec, _ := v[i+1].(string)
		left, _ := v[i+2].(int64)
		p, err := parsePermit(rec)
		if err != nil {
			return info, fmt.Errorf("%w: semaphore %q: permit of %q: %w", driver.ErrInvalid, name, owner, err)
		}
		info.Permits = append(info.Permits, driver.Info{Name: name, Held: true, Owner: owner, Count: p.Count,
			Token: p.Token, Remaining: time.Duration(left) * time.Millisecond, Meta: p.Meta, Weight: p.Weight})
		info.InUse += p.Weight
	}
	return info, nil
}

// permitRecord is a permit's record in the permits hash.
type permitRecord struct {
	Token  int64
	Count  int
	Weight int // the permits it takes
	Meta   string
}

func parsePermit(rec string) (permitRecord, error) {
	var raw struct {
		T string `json:"t"`
		C int    `json:"c"`
		W int    `json:"w"`
		M string `json:"m"`
	}
	if err := json.Unmarshal([]byte(rec), &raw); err != nil {
		return permitRecord{}, err
	}
	tok, err := strconv.ParseInt(raw.T, 10, 64)
	if err != nil {
		return permitRecord{}, fmt.Errorf("token %q: %w", raw.T, err)
	}
	return permitRecord{Token: tok, Count: raw.C, Weight: max(raw.W, 1), Meta: raw.M}, nil
}

// permitAttempt runs the acquire script once, taking a place in line that lives life when
// life is positive (and to which a release hands permits over for handed): a grant and when
// the attempt was sent, or a *driver.HeldError, with what the attempt saw in seen.
func (b *Backend) permitAttempt(ctx context.Context, req driver.Request, life, handed time.Duration, seen *attemptSeen) (driver.Grant, time.Time, error) {
	if err := checkPermit(req); err != nil {
		return driver.Grant{}, time.Now(), err
	}
	keys := b.semKeys(req.Name)
	args := []any{req.Owner, req.Hold, b.ttlArg(req.TTL), b.retentionArg, req.Meta, req.Limit, life.Milliseconds(), max(req.Weight, 1), b.id, handed.Milliseconds()}
	sent := time.Now()
	res, acked, err := b.take(ctx, semAcquireScript, keys, args)
	if err != nil {
		return driver.Grant{}, sent, err
	}
	switch res[0] {
	case -2:
		return driver.Grant{}, sent, fmt.Errorf("%w: %q: this owner holds %d permits and asks for %d", driver.ErrUpgrade, req.Name, res[1], max(req.Weight, 1))
	case -1:
		return driver.Grant{}, sent, &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: int(res[1])}
	case 0:
		if seen != nil && len(res) > 2 {
			*seen = attemptSeen{sent: sent, pttl: res[1], last: res[2]}
		}
		return driver.Grant{}, sent, &driver.HeldError{Name: req.Name, Limit: req.Limit, Remaining: time.Duration(max(res[1], 0)) * time.Millisecond}
	}
	if err := b.unacked(acked, "permit"); err != nil {
		return driver.Grant{}, sent, err
	}
	return driver.Grant{Token: res[1], Count: int(res[2])}, sent, nil
}

// waitForPermit is AcquireQueued for a permit. The caller takes a place in the semaphore's
// line; a release, or a waiter ahead leaving, hands free permits to the waiters first in line
// that fit inside the same script, and announces each grant on a channel of the waiter's
// Backend alone (<prefix>{N}:s:g:<backend ID>), as for a lock (see AcquireQueued): a hand-over
// costs no round trip after the release, and wakes no other waiter. A permit that expires
// goes to the first waiter at its next attempt, made when the first permit's TTL runs out;
// attempts also renew the place, a third of its life apart.
func (b *Backend) waitForPermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	l := b.newLineWait(req, b.semKeys(req.Name)[0]+":g:"+b.id)
	hold := semHold(req.Hold)
	l.w.Message = func(payload string) bool {
		// 'g <token> <hold> <owner>': a release handed a permit to that hold of this Backend's
		// waiters. The owner's other waiters (goroutines under one WithOwner share a place)
		// wake to enter the permit it now holds.
		rest, _ := strings.CutPrefix(payload, "g ")
		tok, rest, _ := strings.Cut(rest, " ")
		to, who, _ := strings.Cut(rest, " ")
		if who != req.Owner {
			return false
		}
		if to == hold {
			l.handed(tok)
		}
		return true
	}
	return l.wait(ctx, &permitLine{b: b, req: req, start: l.start, life: l.life, hand: l.hand})
}

// permitLine is the permit's part of a wait in its semaphore's line (lineKind).
type permitLine struct {
	b          *Backend
	req        driver.Request
	start      time.Time
	life, hand time.Duration
}

func (k *permitLine) attempt(ctx context.Context, seen *attemptSeen) (*driver.Grant, time.Time, error) {
	g, sent, err := k.b.permitAttempt(ctx, k.req, k.life, k.hand, seen)
	if held, full := errors.AsType[*driver.HeldError](err); full {
		seen.pttl = pttlOf(held)
		return nil, sent, nil
	}
	return &g, sent, err
}

func (k *permitLine) finish(ctx context.Context, g *driver.Grant, sent time.Time, err error) (driver.Grant, error) {
	if err != nil {
		return k.b.permitWaited(ctx, k.req, driver.Grant{}, k.start, sent, err)
	}
	return k.b.permitWaited(ctx, k.req, *g, k.start, sent, nil)
}

// handedOver finishes a wait that a release ended with a hand-over. With WithReplicas, an
// attempt confirms it: the owner holds the permit, so the script extends it, and the replicas
// must acknowledge that.
func (k *permitLine) handedOver(ctx context.Context, g driver.Grant, sent time.Time) (driver.Grant, error) {
	if k.b.replicas > 0 {
		confirmed, sent, err := k.b.permitAttempt(ctx, k.req, 0, 0, nil)
		if _, full := errors.AsType[*driver.HeldError](err); full {
			err = fmt.Errorf("%w: a permit of %q was handed over but is no longer held", driver.ErrUnavailable, k.req.Name)
		}
		return k.b.permitWaited(ctx, k.req, confirmed, k.start, sent, err)
	}
	return k.b.permitWaited(ctx, k.req, g, k.start, sent, nil)
}

func (k *permitLine) leave() { k.b.leavePermitLine(k.req) }

// semHold is a hold ID as the semaphore scripts record it (sem_hold): '-' for none.
func semHold(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

// maxLimit is the largest limit the semaphore scripts count exactly: Lua numbers are doubles.
const maxLimit = 1 << 53

// checkPermit says why req cannot ask for a permit at all.
func checkPermit(req driver.Request) error {
	switch {
	case req.Limit > maxLimit:
		return fmt.Errorf("%w: semaphore %q: limit %d: the Redis backend counts permits exactly up to 2^53", driver.ErrInvalid, req.Name, req.Limit)
	case strings.ContainsRune(req.Hold, ' '):
		return fmt.Errorf("%w: hold ID %q contains a space", driver.ErrInvalid, req.Hold)
	}
	return nil
}

// pttlOf is what waitFor wants of a full semaphore: the first permit's time left in ms, or -1
// when a free permit is promised to a waiter ahead.
func pttlOf(held *driver.HeldError) int64 {
	if held.Remaining <= 0 {
		return -1
	}
	return held.Remaining.Milliseconds()
}

// permitWaited finishes a wait whose last attempt, sent at sent, granted g or failed with err;
// a failed attempt may have left the caller in line, or holding a permit handed over.
func (b *Backend) permitWaited(ctx context.Context, req driver.Request, g driver.Grant, start, sent time.Time, err error) (driver.Grant, error) {
	if err != nil {
		if !errors.Is(err, driver.ErrInvalid) || driver.StoreMayHold(err) {
			b.leavePermitLine(req)
		}
		return driver.Grant{}, err
	}
	g.Elapsed = sent.Sub(start)
	return g, nil
}

// leavePermitLine takes the caller out of a semaphore's line, in the background: the caller's
// context may be what ended the wait. Then it releases the caller's hold, in case a release
// handed it a permit before it left, as leave does for a lock. A leave that fails leaves a
// place that lapses within min(TTL, 5s), like a dead waiter's.
func (b *Backend) leavePermitLine(req driver.Request) {
	b.bg.later(func(ctx context.Context) {
		if _, err := b.c.Eval(ctx, semLeaveScript, b.semKeys(req.Name), req.Owner, b.announce, b.retentionArg); err == nil {
			_, _ = b.releasePermit(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL, Limit: req.Limit}, req.Hold)
		}
	})
}

// releasePermit is release for a permit.
func (b *Backend) releasePermit(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	n, err := redisconn.Int64(b.pipe.run(ctx, semReleaseScript, b.semKeys(lease.Name), lease.Owner, hold, b.announce, b.retentionArg, lease.Token))
	switch {
	case err != nil:
		return 0, redislayer.Classify(err)
	case n < 0:
		return 0, fmt.Errorf("%w: no permit of semaphore %q is held by this owner in Redis", driver.ErrNotHeld, lease.Name)
	}
	return int(n), nil
}

var _ driver.Semaphores = (*Backend)(nil)
