package settle_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/internal/settle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests run in synctest bubbles: time moves only when every goroutine waits, so that a
// test sees the settler wait without racing a clock.

// debt is a test's item: one of a hold.
type debt struct{ hold, id string }

func ofHold(hold string) func(debt) bool { return func(d debt) bool { return d.hold == hold } }

// closed closes l and waits until its goroutines have ended.
func closed(l *settle.Ledger[debt]) {
	l.Close()
	<-l.Done()
}

// paying is a Pay that records the items it pays, and succeeds.
func paying(paid *[]string) func(context.Context, *debt) (bool, <-chan struct{}) {
	return func(_ context.Context, d *debt) (bool, <-chan struct{}) {
		*paid = append(*paid, d.id)
		return true, nil
	}
}

// claim starts a Claim of hold's items, and returns the channel its result comes on.
func claim(l *settle.Ledger[debt], hold string, flying func() <-chan struct{}) <-chan []debt {
	claimed := make(chan []debt, 1)
	go func() {
		taken, _ := l.Claim(context.Background(), ofHold(hold), flying)
		claimed <- taken
	}()
	return claimed
}

// stillClaiming fails t when claimed has a result once every other goroutine waits.
func stillClaiming(t *testing.T, claimed <-chan []debt, while string) {
	t.Helper()
	synctest.Wait()
	select {
	case taken := <-claimed:
		t.Fatalf("claimed %v while %s", taken, while)
	default:
	}
}

// blockedWhile is a Blocked that holds the settler off while blocked is set.
func blockedWhile(blocked *atomic.Bool) func() time.Duration {
	return func() time.Duration {
		if blocked.Load() {
			return time.Hour
		}
		return 0
	}
}

func TestOwedIsPaidInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paid []string
		l := settle.New(settle.Config[debt]{Pay: paying(&paid), Backoff: []time.Duration{time.Second}})
		defer closed(l)
		l.Owe(debt{"h", "a"}, nil)
		l.Owe(debt{"h", "b"}, nil)
		<-l.Settled()
		if !slices.Equal(paid, []string{"a", "b"}) || l.Len() != 0 {
			t.Fatalf("paid %v, %d left", paid, l.Len())
		}
	})
}

func TestClaimWaitsForThePaymentOfItsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, result := make(chan string), make(chan bool)
		l := settle.New(settle.Config[debt]{
			Pay: func(_ context.Context, d *debt) (bool, <-chan struct{}) {
				started <- d.id
				return <-result, nil
			},
			Backoff: []time.Duration{time.Second},
		})
		defer closed(l)
		l.Owe(debt{"h", "a"}, nil)
		<-started
		claimed := claim(l, "h", nil)
		stillClaiming(t, claimed, "it was being paid")
		select {
		case <-l.Settled():
			t.Fatal("settled while a payment is in progress")
		default:
		}
		result <- false // the payment fails: a is owed again, and Claim takes it
		if taken := <-claimed; !slices.Equal(taken, []debt{{"h", "a"}}) || l.Len() != 0 {
			t.Fatalf("claimed %v, %d left to the settler", taken, l.Len())
		}
		l.Unclaim([]debt{{"h", "a"}}, nil)
		if id := <-started; id != "a" {
			t.Fatalf("paid %q once given back", id)
		}
		result <- true
		<-l.Settled()
	})
}

func TestClaimWaitsForAPendingWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries atomic.Int32
		l := settle.New(settle.Config[debt]{
			Pay: func(context.Context, *debt) (bool, <-chan struct{}) {
				tries.Add(1)
				return false, nil
			},
			Backoff: []time.Duration{time.Second},
		})
		defer closed(l)
		pending := make(chan struct{})
		l.Owe(debt{"h", "a"}, pending)
		claimed := claim(l, "h", nil)
		stillClaiming(t, claimed, "its write is pending")
		if n := tries.Load(); n != 0 {
			t.Fatalf("paid %d times while its write is pending", n)
		}
		close(pending)
		if taken := <-claimed; !slices.Equal(taken, []debt{{"h", "a"}}) {
			t.Fatalf("claimed %v", taken)
		}
	})
}

func TestALandingWakesTheSettler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paid []string
		l := settle.New(settle.Config[debt]{Pay: paying(&paid), Backoff: []time.Duration{time.Second}})
		defer closed(l)
		pending := make(chan struct{})
		l.Owe(debt{"h", "a"}, pending)
		synctest.Wait()
		start := time.Now()
		close(pending)
		<-l.Settled()
		if !slices.Equal(paid, []string{"a"}) || time.Since(start) != 0 {
			t.Fatalf("paid %v, %v after the landing", paid, time.Since(start))
		}
	})
}

func TestClaimWaitsForAWriteInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var blocked atomic.Bool
		blocked.Store(true)
		l := settle.New(settle.Config[debt]{
			Pay:     paying(new([]string)),
			Backoff: []time.Duration{time.Second},
			Blocked: blockedWhile(&blocked),
		})
		defer closed(l)
		landed := make(chan struct{})
		flying := func() <-chan struct{} {
			select {
			case <-landed:
				return nil
			default:
				return landed
			}
		}
		claimed := claim(l, "h", flying)
		stillClaiming(t, claimed, "a write is in flight")
		l.Owe(debt{"h", "a"}, nil) // what the write left, once it landed
		close(landed)
		if taken := <-claimed; !slices.Equal(taken, []debt{{"h", "a"}}) {
			t.Fatalf("claimed %v", taken)
		}
	})
}

func TestClaimGivesUpWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		result := make(chan bool)
		l := settle.New(settle.Config[debt]{
			Pay:     func(context.Context, *debt) (bool, <-chan struct{}) { return <-result, nil },
			Backoff: []time.Duration{time.Second},
		})
		defer closed(l)
		l.Owe(debt{"h", "a"}, nil)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if taken, err := l.Claim(ctx, ofHold("h"), nil); !errors.Is(err, context.DeadlineExceeded) || taken != nil {
			t.Fatalf("Claim past its deadline: %v %v", taken, err)
		}
		result <- true
		<-l.Settled()
	})
}

func TestUnclaimDropsWhatTheGrantMadeVoid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paid []string
		var blocked atomic.Bool
		blocked.Store(true)
		l := settle.New(settle.Config[debt]{
			Pay:     paying(&paid),
			Backoff: []time.Duration{time.Second},
			Blocked: blockedWhile(&blocked),
		})
		defer closed(l)
		l.Owe(debt{"h", "a"}, nil)
		l.Owe(debt{"h", "b"}, nil)
		l.Owe(debt{"other", "c"}, nil)
		synctest.Wait()
		taken, err := l.Claim(context.Background(), ofHold("h"), nil)
		if err != nil || len(taken) != 2 || l.Len() != 1 {
			t.Fatalf("claimed %v %v, %d left", taken, err, l.Len())
		}
		blocked.Store(false)
		l.Unclaim(taken, func(d debt) bool { return d.id == "a" }) // the grant adopted a
		<-l.Settled()
		if !slices.Equal(paid, []string{"c", "b"}) {
			t.Fatalf("paid %v", paid)
		}
	})
}

func TestBackoffAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		l := settle.New(settle.Config[debt]{
			Pay: func(context.Context, *debt) (bool, <-chan struct{}) {
				at = append(at, time.Since(start))
				return len(at) > 3, nil
			},
			Backoff: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		})
		defer closed(l)
		l.Owe(debt{"h", "a"}, nil)
		<-l.Settled()
		want := []time.Duration{0, 10 * time.Millisecond, 30 * time.Millisecond, 50 * time.Millisecond}
		if !slices.Equal(at, want) {
			t.Fatalf("tried at %v, want %v", at, want)
		}
	})
}

// Kick cuts the backoff short; an Unclaim that gives nothing back, as most acquisitions' do,
// does not.
func TestKickCutsTheBackoffShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries atomic.Int32
		l := settle.New(settle.Config[debt]{
			Pay:     func(context.Context, *debt) (bool, <-chan struct{}) { return tries.Add(1) > 1, nil },
			Backoff: []time.Duration{time.Hour},
		})
		defer closed(l)
		start := time.Now()
		l.Owe(debt{"h", "a"}, nil)
		synctest.Wait() // the first try failed: the settler waits its backoff
		l.Unclaim(nil, nil)
		l.Unclaim([]debt{{"h", "b"}}, func(debt) bool { return true })
		synctest.Wait()
		if n := tries.Load(); n != 1 {
			t.Fatalf("%d tries within the backoff", n)
		}
		l.Kick()
		<-l.Settled()
		if took := time.Since(start); took != 0 {
			t.Fatalf("paid %v after the kick", took)
		}
	})
}

func TestOweMergesTheSame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paid []string
		l := settle.New(settle.Config[debt]{
			Pay:     paying(&paid),
			Backoff: []time.Duration{time.Second},
			Same:    func(a, b debt) bool { return a == b },
		})
		defer closed(l)
		write, other := make(chan struct{}), make(chan struct{})
		l.Owe(debt{"h", "a"}, write)
		l.Owe(debt{"h", "a"}, nil)   // the same: it waits for write too
		l.Owe(debt{"h", "a"}, write) // the same write
		if n := l.Len(); n != 1 {
			t.Fatalf("%d owed, want 1", n)
		}
		l.Owe(debt{"h", "a"}, other) // a write of its own, while the other waits for its own
		if n := l.Len(); n != 2 {
			t.Fatalf("%d owed, want 2", n)
		}
		close(write)
		close(other)
		<-l.Settled()
		if !slices.Equal(paid, []string{"a", "a"}) {
			t.Fatalf("paid %v", paid)
		}
	})
}

func TestGoneIsNotPaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paid []string
		l := settle.New(settle.Config[debt]{
			Pay:     paying(&paid),
			Backoff: []time.Duration{time.Second},
			Gone:    func(d debt) bool { return d.id == "gone" },
		})
		defer closed(l)
		l.Owe(debt{"h", "gone"}, nil)
		l.Owe(debt{"h", "b"}, nil)
		<-l.Settled()
		if !slices.Equal(paid, []string{"b"}) {
			t.Fatalf("paid %v", paid)
		}
	})
}

func TestCloseEndsTheSettler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		l := settle.New(settle.Config[debt]{
			Pay: func(ctx context.Context, _ *debt) (bool, <-chan struct{}) {
				close(started)
				<-ctx.Done()
				return false, nil
			},
			Backoff: []time.Duration{time.Second},
		})
		l.Owe(debt{"h", "a"}, nil)
		l.Owe(debt{"h", "b"}, make(chan struct{})) // its write never lands
		<-started
		l.Close()
		<-l.Done()
		l.Owe(debt{"h", "c"}, nil) // recorded, and paid by no one
		synctest.Wait()
		if n := l.Len(); n != 3 {
			t.Fatalf("%d owed after Close, want 3", n)
		}
	})
}
