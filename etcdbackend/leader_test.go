package etcdbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Every leader an observer reads is one a contender really had: its term with the value that
// contender campaigned with, under churn — contenders that campaign and resign in a loop, with
// the owner IDs their Clients reuse. Inspect used to read the head of the line and its owner's
// metadata in two requests: the owner had resigned and campaigned again in between, and the
// term came with the next term's value, or with none.
func TestLeaderPairsTermWithItsValue(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	const name = "leader-pairs"
	run, stop := context.WithTimeout(ctx, 4*time.Second)
	defer stop()
	var mu sync.Mutex // guards terms
	terms := map[int64]string{}
	var wg sync.WaitGroup
	for i := range 3 {
		b, _ := newBackend(t, etcd)
		e := newLocker(t, b).Election(name)
		wg.Go(func() {
			for n := 0; run.Err() == nil; n++ {
				value := fmt.Sprintf("contender %d, campaign %d", i, n)
				l, err := e.Campaign(run, value)
				if err != nil {
					continue // ended by run, or the term was given up: checked by value below
				}
				mu.Lock()
				terms[l.Term()] = value
				mu.Unlock()
				_ = l.Resign(ctx)
			}
		})
	}
	ob, _ := newBackend(t, etcd)
	observer := newLocker(t, ob).Election(name)
	var seen []fencelock.Leader
	for run.Err() == nil {
		l, err := observer.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Elected {
			seen = append(seen, l)
		}
	}
	wg.Wait()
	values := map[string]int64{}
	for term, v := range terms {
		values[v] = term
	}
	bad := 0
	for _, l := range seen {
		term, campaigned := values[l.Value]
		v, known := terms[l.Term]
		if l.Value == "" || (campaigned && term != l.Term) || (known && v != l.Value) {
			if bad++; bad <= 3 {
				t.Errorf("read term %d with value %q; that term's value is %q, and %q won term %d", l.Term, l.Value, v, l.Value, term)
			}
		}
	}
	if bad > 0 || len(seen) < 10 || len(terms) < 10 {
		t.Fatalf("%d of %d leaders read were no leader's; %d terms were won", bad, len(seen), len(terms))
	}
}
