package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
)

// Callers that disagree on a semaphore's limit never hold more permits together than the
// smaller limit allows: at every grant, the permits believed valid (Valid() == nil) fit in the
// limit of each of their holders. A caller refused with a *LimitError used to leave its key in
// line while it left; once that key was the oldest, callers of its limit agreed with it and
// counted against their own limit, and callers of the other limit then agreed with them.
//
// Stalled, each caller's goroutine pauses now and then right after etcd answered a
// transaction of its: a refused caller's key stayed in line as long.
func TestDisagreeingLimitsNeverOversubscribe(t *testing.T) {
	t.Run("Plain", func(t *testing.T) { disagreeingLimits(t, "limits-disagree", false) })
	t.Run("Stalled", func(t *testing.T) { disagreeingLimits(t, "limits-disagree-stalled", true) })
}

func disagreeingLimits(t *testing.T, name string, stalled bool) {
	ctx := bounded(t, 60*time.Second)
	var watch permitWatch
	run, stop := context.WithTimeout(ctx, 6*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 6 {
		limit := 2 + i%2
		b, _ := newBackend(t, etcd)
		if stalled {
			b = newStalledBackend(t)
		}
		sem := newLocker(t, b).Semaphore(name, limit)
		wg.Go(func() {
			// 6 s, and on (within the test's bound) until each limit got a grant: one limit's
			// callers are refused while the other's permits are held, and an idle full run once
			// saw 564 grants of limit 2 and none of limit 3 in 6 s.
			for (run.Err() == nil || !watch.eachLimitGranted()) && ctx.Err() == nil && !watch.failed() {
				actx, cancel := context.WithTimeout(ctx, time.Duration(20+rand.IntN(200))*time.Millisecond)
				l, err := sem.Acquire(actx)
				cancel()
				if err != nil {
					var le *fencelock.LimitError
					if !errors.As(err, &le) && !errors.Is(err, fencelock.ErrNotObtained) {
						watch.fail(fmt.Errorf("limit %d: %w", limit, err))
					}
					continue
				}
				watch.granted(l, limit)
				for range rand.IntN(3) {
					// Hold it across a few grants of others.
					if _, err := b.InspectSemaphore(ctx, name); err != nil {
						watch.fail(err)
					}
				}
				watch.released(l)
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if err := watch.err(); err != nil {
		t.Fatal(err)
	}
	if watch.grants[2] == 0 || watch.grants[3] == 0 {
		t.Fatalf("grants by limit: %v; want some of each", watch.grants)
	}
	t.Logf("grants by limit: %v", watch.grants)
}

// permitWatch keeps the permits of a semaphore its holders believe valid, and checks at each
// grant that they fit in the limit of every one of them. A holder leaves it before it
// releases, so the permits in the store are never more than those it keeps.
type permitWatch struct {
	mu      sync.Mutex // guards the rest
	holders map[*fencelock.Lock]int
	grants  map[int]int
	first   error
}

func (w *permitWatch) granted(l *fencelock.Lock, limit int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holders == nil {
		w.holders, w.grants = map[*fencelock.Lock]int{}, map[int]int{}
	}
	w.holders[l] = limit
	w.grants[limit]++
	valid, least := 0, limit
	for h, lim := range w.holders {
		if h.Valid() == nil {
			valid++
			least = min(least, lim)
		}
	}
	if valid > least && w.first == nil {
		w.first = fmt.Errorf("%d permits believed valid at once, and one of their holders asked for a limit of %d (this grant's: %d, token %d)", valid, least, limit, l.Token())
	}
}

func (w *permitWatch) released(l *fencelock.Lock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.holders, l)
}

func (w *permitWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == nil {
		w.first = err
	}
}

func (w *permitWatch) failed() bool { return w.err() != nil }

// eachLimitGranted reports whether callers of both limits, 2 and 3, got a permit.
func (w *permitWatch) eachLimitGranted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grants[2] > 0 && w.grants[3] > 0
}

func (w *permitWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// newStalledBackend returns a Backend whose goroutines pause for up to 50ms after one in
// four of the transactions etcd answered, closed when the test ends.
func newStalledBackend(t testing.TB) *etcdbackend.Backend {
	cli := etcd.Client(t)
	cli.KV = stalledKV{KV: cli.KV}
	b := etcdbackend.New(cli)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

type stalledKV struct{ clientv3.KV }

func (k stalledKV) Txn(ctx context.Context) clientv3.Txn {
	return &wrappedTxn{Txn: k.KV.Txn(ctx), commit: func(txn clientv3.Txn) (*clientv3.TxnResponse, error) {
		resp, err := txn.Commit()
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // the fault: a stall
		}
		return resp, err
	}}
}
