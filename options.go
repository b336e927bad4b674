package fencelock

import (
	"log/slog"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Defaults of the per-call options.
const (
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL accepted: below it the renewal interval and the drift
	// allowance leave no room for a renewal to arrive in time.
	MinTTL = 10 * time.Millisecond
)

// Option configures one Obtain, TryObtain or Do call, or, given to New through WithDefaults,
// every call of a Client.
type Option func(*settings)

// settings are the resolved per-call options. Zero values mean the default.
type settings struct {
	ttl         time.Duration
	owner       string
	retry       RetryStrategy
	noWatchdog  bool
	renewEvery  time.Duration // as the caller set it; 0 for the default
	every       time.Duration // the renewal interval for ttl, resolved by validate
	onLost      func(name string, err error)
	waitTimeout time.Duration
	hasWait     bool
	meta        string
	fresh       bool // an owner of its own, never a context's lock re-entered (Campaign)
	weight      int  // the permits a semaphore's Acquire takes; 0 for 1
	reenter     bool // a permit may be re-entered through its context (RWLock)
	maxHold     time.Duration
	minHold     time.Duration
	lockDelay   time.Duration
}

// WithWeight makes a semaphore's Acquire take n of its permits at once. Default: 1. A lock
// ignores it.
func WithWeight(n int) Option { return func(s *settings) { s.weight = n } }

// MaxMetadata bounds what WithMetadata publishes: it travels with every first acquisition.
const MaxMetadata = 1024

// WithTTL sets the lock's time to live: how long the store keeps it after the last renewal if
// the holder goes away. Default: DefaultTTL (30s).
func WithTTL(ttl time.Duration) Option { return func(s *settings) { s.ttl = ttl } }

// WithOwner makes the acquisition on behalf of an explicit owner ID instead of a random one:
// acquisitions with the same owner re-enter each other's lock, across goroutines and
// processes. The ID must be unique to the holder; a shared ID makes two holders one.
// Default: a fresh 128-bit random owner per acquisition (on etcd, see driver.OwnerReuser), inherited
// through lock.Context().
func WithOwner(owner string) Option { return func(s *settings) { s.owner = owner } }

// WithRetry replaces the wake-on-release wait with polling at the strategy's intervals. Use it
// for a backend without release notification, or to bound the number of attempts. Strategies
// that count attempts (ExponentialBackoff, LimitRetry) keep their count across calls: give each
// Obtain its own, and only stateless ones (LinearBackoff) to WithDefaults.
// Default: wait for a release notification or the holder's remaining TTL, whichever is first.
func WithRetry(r RetryStrategy) Option { return func(s *settings) { s.retry = r } }

// WithWatchdog turns automatic renewal on or off. With it off, the holder extends the lock by
// hand with Lock.Refresh; the lock's context still ends when its validity runs out.
// Default: on.
func WithWatchdog(on bool) Option { return func(s *settings) { s.noWatchdog = !on } }

// WithRenewInterval sets how often the watchdog renews. It must leave room for a retry before
// the validity deadline — at most half of TTL minus the drift allowance — and must not flood
// the store: at least 1/100 of the TTL and at least MinRenewInterval. Default: TTL/3, which
// follows the TTL when Refresh changes it; an explicit interval stays.
func WithRenewInterval(d time.Duration) Option { return func(s *settings) { s.renewEvery = d } }

// MinRenewInterval is the shortest renewal interval accepted (see WithRenewInterval).
const MinRenewInterval = time.Millisecond

// WithOnLost sets a function called once, from the Client's renewal goroutine or the goroutine
// that noticed, when the lock is lost; err matches ErrLost and says why. It must not block.
func WithOnLost(fn func(name string, err error)) Option {
	return func(s *settings) { s.onLost = fn }
}

// WithMetadata publishes meta with the lock for operators to read (Client.Inspect, fencelock
// status): typically who holds it, such as host, process ID and start time. At most
// MaxMetadata bytes. Default: nothing is published.
func WithMetadata(meta string) Option { return func(s *settings) { s.meta = meta } }

// WithMaxHold caps how long a lock is held: d after its grant reached the Client (as Obtain
// returns) the watchdog has stopped renewing it, its validity ends whatever a renewal or
// Refresh said, its context ends with a cause that matches ErrLost and ErrMaxHold, and the
// Client releases it in the store. It is for a holder that may hang (a deadlock in the job, a
// call with no timeout), which the watchdog would otherwise keep renewing for as long as its
// process lives. The cap is the first hold's: a re-entry under a lock already held keeps it.
// Default: no cap.
func WithMaxHold(d time.Duration) Option { return func(s *settings) { s.maxHold = d } }

// WithMinHold keeps a lock held for at least d after its grant: a Release before then returns
// at once and ends the handle, but the name stays taken until d after the grant, and the next
// holder is served then. It is for a job run from cron on several hosts, whose clocks differ by
// more than the job takes: without it, a host whose cron fires after the first host's job ended
// runs the job again. On a store that ends a lock by its TTL (Redis, Redlock, the memory store,
// see driver.Expirer) the release sets the lock's TTL to what is left of d, so the minimum holds even
// if the process exits at once; on etcd and ZooKeeper, whose locks live as long as their
// session, the Client keeps the lock until then and releases it, and Close waits for that. Each
// hold's minimum counts: the lock is kept until the latest of them. Default: none.
func WithMinHold(d time.Duration) Option { return func(s *settings) { s.minHold = d } }

// WithLockDelay keeps a lock its holder lost without releasing it — its TTL ran out, its
// process paused or was cut off — from every other holder for d after its holder stopped
// trusting it: the store keeps the lock d longer than the Client does. A holder paused past its
// validity, which may still send a write it prepared, then meets no new holder for d: the
// lock-delay of Chubby and Consul. A Release frees the name at once. It slows every failover
// by d, which is why it is off by default. It needs a store that ends a lock by its TTL
// (Redis, Redlock, the memory store: see driver.Expirer); on etcd and ZooKeeper, whose locks end
// with their session, an Obtain with it is refused with ErrInvalid. The delay is the first
// hold's. Default: none.
func WithLockDelay(d time.Duration) Option { return func(s *settings) { s.lockDelay = d } }

// floor is when the minimum hold of a grant whose request was sent at sent ends; zero for none.
func (s *settings) floor(sent time.Time) time.Time {
	if s.minHold <= 0 {
		return time.Time{}
	}
	return sent.Add(s.minHold)
}

// WithWaitTimeout bounds how long Obtain waits for the lock, apart from its context. Zero
// makes Obtain behave like TryObtain. Default: wait until the context ends.
func WithWaitTimeout(d time.Duration) Option {
	return func(s *settings) { s.waitTimeout, s.hasWait = d, true }
}

// drift is the allowance subtracted from a validity v (the time the store keeps a lock, counted
// from a send) to get the time the client trusts it (driver.Drift). It is measured on v, not on
// the TTL: a lock handed over for 5 s with a TTL of 10 min loses 52 ms to drift, not 6 s.
func drift(v time.Duration) time.Duration { return driver.Drift(v) }

func (s *settings) validate() error {
	if s.ttl <= 0 {
		return invalidf("TTL must be positive, got %v", s.ttl)
	}
	if s.ttl < MinTTL {
		return invalidf("TTL %v is shorter than the minimum %v", s.ttl, MinTTL)
	}
	if s.ttl%time.Millisecond != 0 {
		return invalidf("TTL %v is not a whole number of milliseconds", s.ttl)
	}
	if err := s.interval(); err != nil {
		return err
	}
	if len(s.meta) > MaxMetadata {
		return invalidf("metadata of %d bytes is longer than the maximum %d", len(s.meta), MaxMetadata)
	}
	if s.waitTimeout < 0 {
		return invalidf("wait timeout must not be negative, got %v", s.waitTimeout)
	}
	if s.maxHold < 0 {
		return invalidf("max hold must not be negative, got %v", s.maxHold)
	}
	if s.lockDelay < 0 || s.lockDelay%time.Millisecond != 0 {
		return invalidf("lock delay %v is negative or not a whole number of milliseconds", s.lockDelay)
	}
	if s.lockDelay > 0 && trusted(s.ttl+s.lockDelay, s.lockDelay) < s.ttl/2 {
		// The drift allowance counts on what the store keeps, TTL and delay together.
		return invalidf("lock delay %v is too long for TTL %v: the drift allowance of %v on both leaves less than half the TTL trusted", s.lockDelay, s.ttl, drift(s.ttl+s.lockDelay))
	}
	if s.minHold < 0 {
		return invalidf("min hold must not be negative, got %v", s.minHold)
	}
	if s.maxHold > 0 && s.minHold > s.maxHold {
		return invalidf("min hold %v is longer than max hold %v", s.minHold, s.maxHold)
	}
	return nil
}

// interval resolves and checks the renewal interval for the TTL.
func (s *settings) interval() error {
	switch {
	case s.renewEvery < 0:
		return invalidf("renewal interval must be positive, got %v", s.renewEvery)
	case s.renewEvery == 0:
		s.every = s.ttl / 3
		return nil
	}
	if limit := (s.ttl - drift(s.ttl)) / 2; s.renewEvery > limit {
		return invalidf("renewal interval %v is too long for TTL %v: at most %v leaves room for one retry", s.renewEvery, s.ttl, limit)
	}
	if floor := max(s.ttl/100, MinRenewInterval); s.renewEvery < floor {
		return invalidf("renewal interval %v is too short for TTL %v: at least %v", s.renewEvery, s.ttl, floor)
	}
	s.every = s.renewEvery
	return nil
}

// MaxTokenBase is the greatest base WithTokenBase accepts: a base and a store's token add up
// without overflow for every token below 2^62 (Redis's, its clock in microseconds, are about
// 2^51).
const MaxTokenBase = 1 << 62

// WithTokenBase adds base to every fencing token the Client hands out: a Lock's Token, a
// leader's Term, the Token of an Event and of what Inspect, List and a Semaphore's Inspect
// report. It is for moving names from one backend to another. Tokens compare only within one
// store: Redis's are its clock in microseconds (about 1.8e15 in 2026), etcd's are revisions and
// ZooKeeper's transaction IDs (thousands to millions), so a fenced store that accepted Redis's
// tokens refuses every write of a holder on etcd. Start the new backend's Clients with a base
// above the greatest token the fenced store accepted, and its tokens go on from there. The
// package-level List and ListSemaphores, which read a Backend, report the store's own tokens.
// A base below 0 or above MaxTokenBase makes every call fail with ErrInvalid. Default: 0.
func WithTokenBase(base int64) ClientOption {
	return func(c *Client) {
		if base < 0 || base > MaxTokenBase {
			c.err = invalidf("token base %d: want 0 to %d", base, int64(MaxTokenBase))
			return
		}
		c.tokenBase = base
	}
}

// based returns info with the Client's token base added to its tokens.
func (c *Client) based(info Info) Info {
	if info.Token != 0 {
		info.Token += c.tokenBase
	}
	return info
}

// basedSemaphore returns info with the Client's token base added to its tokens.
func (c *Client) basedSemaphore(info SemaphoreInfo) SemaphoreInfo {
	if info.Token != 0 {
		info.Token += c.tokenBase
	}
	if c.tokenBase != 0 && len(info.Permits) > 0 {
		permits := make([]Info, len(info.Permits))
		for i, p := range info.Permits {
			permits[i] = c.based(p)
		}
		info.Permits = permits
	}
	return info
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithDefaults sets options applied to every call before the call's own options.
func WithDefaults(opts ...Option) ClientOption {
	return func(c *Client) { c.defaults = append(c.defaults, opts...) }
}

// WithClock replaces the clock that validity deadlines are measured with. Tests use it to skew
// time; the clock's readings must carry Go's monotonic reading (time.Now does). Default:
// time.Now.
func WithClock(now func() time.Time) ClientOption { return func(c *Client) { c.now = now } }

// WithObserver adds a function told of every obtain, wait, renewal, loss and release. It is
// called synchronously and must not block. Observers add up: with several (WithObserver,
// WithLogger, a metrics module's Observe), each is told every event, in the order of the
// options. A nil fn adds nothing. Default: none; the library never logs by itself.
func WithObserver(fn func(Event)) ClientOption {
	return func(c *Client) {
		switch prev := c.observe; {
		case fn == nil:
		case prev == nil:
			c.observe = fn
		default:
			c.observe = func(e Event) { prev(e); fn(e) }
		}
	}
}

// WithLogger sends every event to h at debug level — a loss and a store out of reach
// (EventUnavailable) at warn level, the store reached again at info level: an observer
// (WithObserver), beside any other.
func WithLogger(h slog.Handler) ClientOption { return WithObserver(slogObserver(h)) }

// WithCleanupTimeout bounds each piece of clean-up the Client does in the background: undoing
// an acquisition whose outcome was unknown or whose grant came too late, and finishing a
// Release that its own context did not let finish. Close waits for that work, so this also
// bounds Close. It must be positive and at most MaxCleanupTimeout; otherwise every call of the
// Client fails with an error matching ErrInvalid. Default: 2s.
func WithCleanupTimeout(d time.Duration) ClientOption {
	return func(c *Client) {
		if d <= 0 || d > MaxCleanupTimeout {
			c.err = invalidf("cleanup timeout %v: want more than 0 and at most %v", d, MaxCleanupTimeout)
			return
		}
		c.cleanupTimeout = d
	}
}

// MaxCleanupTimeout is the longest cleanup timeout accepted (see WithCleanupTimeout).
const MaxCleanupTimeout = 10 * time.Minute
