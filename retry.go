package fencelock

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// RetryStrategy says how long to wait before the next attempt to obtain a lock. A zero
// duration ends the waiting. Strategies are safe for concurrent use, but each Obtain call
// should get its own, since some count attempts.
type RetryStrategy interface {
	NextBackoff() time.Duration
}

type linear time.Duration

// LinearBackoff retries at a fixed interval.
func LinearBackoff(d time.Duration) RetryStrategy { return linear(d) }

func (l linear) NextBackoff() time.Duration { return time.Duration(l) }

// NoRetry makes a single attempt.
func NoRetry() RetryStrategy { return linear(0) }

type exponential struct {
	attempt  atomic.Int64
	min, max time.Duration
}

// ExponentialBackoff doubles the interval from min up to max.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	return &exponential{min: min, max: max}
}

func (e *exponential) NextBackoff() time.Duration {
	n := e.attempt.Add(1) - 1
	if n > 62 {
		return e.max
	}
	d := e.min << n
	if d <= 0 || d > e.max || d < e.min {
		return e.max
	}
	return d
}

type limited struct {
	attempts atomic.Int64
	max      int64
	s        RetryStrategy
}

// LimitRetry allows at most max retries of s.
func LimitRetry(s RetryStrategy, max int) RetryStrategy {
	return &limited{s: s, max: int64(max)}
}

func (l *limited) NextBackoff() time.Duration {
	if l.attempts.Add(1) > l.max {
		return 0
	}
	return l.s.NextBackoff()
}

type jittered struct {
	s        RetryStrategy
	fraction float64
}

// WithJitter spreads each interval of s at random over [d·(1−fraction), d·(1+fraction)], so
// that waiters that failed together do not retry together. fraction is clamped to [0, 1].
func WithJitter(s RetryStrategy, fraction float64) RetryStrategy {
	return jittered{s: s, fraction: min(max(fraction, 0), 1)}
}

func (j jittered) NextBackoff() time.Duration {
	d := j.s.NextBackoff()
	if d <= 0 {
		return d
	}
	spread := float64(d) * j.fraction
	return max(time.Duration(float64(d)-spread+rand.Float64()*2*spread), 1)
}
