package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redlock"
)

// A term is a leader's once its Campaign returned it: the majority read of Leader and Observe
// reports no other. While an acquisition settles its token the nodes hold its owner with a
// token not yet agreed (0 before a token round, or a proposal a minority stored); reported,
// that was a term no leader had, below the terms sent before it. Contenders that take a token
// round at every acquisition (WithoutClockTokens: the proposal of a Backend whose clock is
// behind the counters does the same) campaign and resign in a loop, while an observer reads.
func TestLeaderReportsOnlyTermsALeaderHad(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	name := "churn-" + t.Name()
	const contenders, terms = 3, 30

	type term struct{ owner, value string }
	var mu sync.Mutex
	won := make(map[int64]term) // guarded by mu
	var wg sync.WaitGroup
	for i := range contenders {
		b := newBackend(t, dial(t, addrs), redlock.WithoutClockTokens())
		e := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(10*time.Second))).Election(name)
		wg.Go(func() {
			for k := range terms {
				value := fmt.Sprintf("contender-%d-term-%d", i, k)
				l, err := e.Campaign(ctx, value)
				if err != nil {
					t.Errorf("Campaign %s: %v", value, err)
					return
				}
				mu.Lock()
				if prev, ok := won[l.Term()]; ok {
					t.Errorf("term %d won twice: by %+v and by %s", l.Term(), prev, value)
				}
				won[l.Term()] = term{l.Lock().Owner(), value}
				mu.Unlock()
				if err := l.Resign(ctx); err != nil {
					t.Errorf("Resign %s: %v", value, err)
					return
				}
			}
		})
	}

	observer := newLocker(t, newBackend(t, dial(t, addrs))).Election(name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := observer.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	var observed []fencelock.Leader
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		for l := range stream {
			observed = append(observed, l)
		}
	}()
	var read []fencelock.Leader
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for octx.Err() == nil {
			if l, err := observer.Leader(octx); err == nil {
				read = append(read, l)
			}
		}
	}()
	wg.Wait()
	stop()
	<-streamDone
	<-readDone

	check := func(how string, reports []fencelock.Leader) {
		t.Helper()
		var last int64
		elected := 0
		for _, l := range reports {
			if !l.Elected {
				continue
			}
			elected++
			if w, ok := won[l.Term]; !ok || w.owner != l.Owner || w.value != l.Value {
				t.Errorf("%s reported term %d (owner %q, value %q), which no Campaign returned", how, l.Term, l.Owner, l.Value)
			}
			if l.Term < last {
				t.Errorf("%s reported term %d after term %d", how, l.Term, last)
			}
			last = max(last, l.Term)
		}
		if elected == 0 {
			t.Errorf("%s reported no leader in %d reports while %d terms were won", how, len(reports), len(won))
		}
	}
	t.Logf("observed %d, read %d, won %d", len(observed), len(read), len(won))
	check("Observe", observed)
	check("Leader", read)
}
