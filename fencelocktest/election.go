package fencelocktest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// RunElection runs the election suite as subtests of t. It uses Target.Drop.
func RunElection(t *testing.T, target Target) {
	s := suite{Target: target}
	t.Run("OneLeaderAndTermsIncrease", s.electOneLeader)
	t.Run("CampaignContextEndsLeavesNothing", s.electCampaignContextEnds)
	t.Run("CampaignFromALeadersContextIsANewContender", s.electNoReentry)
	t.Run("ObserveSeesEachChange", s.electObserve)
	t.Run("ObserveSeesHandOverAsNewTerm", s.electObserveHandOver)
	t.Run("ProclaimChangesTheValueNotTheTerm", s.electProclaim)
	t.Run("CandidatesListTheLeaderAndTheLine", s.electCandidates)
	t.Run("LossEndsLeadership", s.electLoss)
	t.Run("LeadCampaignsAgainAfterLoss", s.electLeadAgain)
	t.Run("LeadReturnsWhatFnReturns", s.electLeadReturns)
	t.Run("CloseResigns", s.electCloseResigns)
}

// One contender leads at a time; the next one leads when it resigns, with a greater term, and
// Leader says who leads with what value.
func (s suite) electOneLeader(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	a, b := s.client(t).Election(name), s.client(t).Election(name)
	first, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *fencelock.Leadership, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := b.Campaign(ctx, "host-b")
		if err != nil {
			errs <- err
			return
		}
		won <- l
	}()
	leader, err := b.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !leader.Elected || leader.Term != first.Term() || leader.Value != "host-a" {
		t.Fatalf("Leader while host-a leads: %+v, want term %d and host-a", leader, first.Term())
	}
	select {
	case l := <-won:
		t.Fatalf("host-b was elected (term %d) while host-a led (term %d)", l.Term(), first.Term())
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if first.Context().Err() == nil {
		t.Fatal("a resigned leadership's context is still open")
	}
	var second *fencelock.Leadership
	select {
	case second = <-won:
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("host-b was never elected after host-a resigned")
	}
	if second.Term() <= first.Term() {
		t.Fatalf("term %d after term %d", second.Term(), first.Term())
	}
	if leader, err := a.Leader(ctx); err != nil || leader.Term != second.Term() || leader.Value != "host-b" {
		t.Fatalf("Leader after the hand-over: %+v, %v", leader, err)
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if leader, err := a.Leader(ctx); err != nil || leader.Elected {
		t.Fatalf("Leader after every resignation: %+v, %v", leader, err)
	}
}

// A Campaign whose context ends fails as a wait does, and leaves no key behind to lead later.
func (s suite) electCampaignContextEnds(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	e := s.client(t).Election(name)
	first, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.client(t).Election(name).Campaign(short, "b"); !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Campaign whose context ended: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 3*s.TTL, "a leader after the only leader resigned", func() bool {
		l, err := e.Leader(ctx)
		return err == nil && !l.Elected
	})
}

// A Campaign made under a leader's context does not re-enter its lock: it is a contender of
// its own, which waits.
func (s suite) electNoReentry(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	e := s.client(t).Election(s.name(t))
	first, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Resign(ctx)
	inner, cancel := context.WithTimeout(first.Context(), 200*time.Millisecond)
	defer cancel()
	if l, err := e.Campaign(inner, "b"); err == nil {
		t.Fatalf("a Campaign under the leader's context won term %d while term %d led", l.Term(), first.Term())
	}
}

// observing is an Observe of one election, read one change at a time.
type observing struct {
	t    *testing.T
	ctx  context.Context
	seen <-chan fencelock.Leader
	stop context.CancelFunc
}

// observe starts an Observe of e, stopped when the test ends, and reads its first look, which
// finds no leader: each test elects under a name of its own.
func observe(t *testing.T, ctx context.Context, e *fencelock.Election) *observing {
	t.Helper()
	octx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	seen, err := e.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	o := &observing{t: t, ctx: ctx, seen: seen, stop: stop}
	if l := o.next("the first look"); l.Elected {
		t.Fatalf("Observe's first look at a new election: %+v", l)
	}
	return o
}

// next is the next change Observe sends; the test fails if Observe closes or sends nothing
// before the test's deadline.
func (o *observing) next(what string) fencelock.Leader {
	o.t.Helper()
	select {
	case l, ok := <-o.seen:
		if !ok {
			o.t.Fatalf("Observe closed before %s", what)
		}
		return l
	case <-o.ctx.Done():
		o.t.Fatalf("Observe sent nothing more, waiting for %s", what)
	}
	return fencelock.Leader{}
}

// Observe sends the leader at once, then each change: a new leader, no leader.
func (s suite) electObserve(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	o := observe(t, ctx, s.client(t).Election(name))
	next := o.next
	a, err := s.client(t).Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if l := next("a's term"); !l.Elected || l.Term != a.Term() || l.Value != "a" {
		t.Fatalf("Observe after a was elected: %+v, want term %d", l, a.Term())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next("no leader"); l.Elected {
		t.Fatalf("Observe after a resigned: %+v, want no leader", l)
	}
	b, err := s.client(t).Election(name).Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	if l := next("b's term"); !l.Elected || l.Term != b.Term() || l.Value != "b" {
		t.Fatalf("Observe after b was elected: %+v, want term %d", l, b.Term())
	}
	o.stop()
	for range o.seen { // closes once its context ended
	}
}

// A leadership whose lock is removed behind its back ends its context with ErrLost, and
// another contender leads with a greater term.
func (s suite) electLoss(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	first, err := s.client(t).Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	s.Drop(t, name)
	select {
	case <-first.Context().Done():
	case <-time.After(3 * s.TTL):
		t.Fatalf("the leadership's context was still open %v after its lock was removed", 3*s.TTL)
	}
	if !errors.Is(context.Cause(first.Context()), fencelock.ErrLost) || first.Valid() == nil {
		t.Fatalf("a lost leadership: cause %v, Valid %v", context.Cause(first.Context()), first.Valid())
	}
	second, err := s.client(t).Election(name).Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Resign(ctx)
	if second.Term() <= first.Term() {
		t.Fatalf("term %d after the lost term %d", second.Term(), first.Term())
	}
}

// Lead runs fn for each term, and campaigns again after a lost one.
func (s suite) electLeadAgain(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var terms []int64
	started := make(chan struct{}, 4)
	done := make(chan error, 1)
	go func() {
		done <- s.client(t).Election(name).Lead(lctx, "daemon", func(ctx context.Context, term int64) error {
			mu.Lock()
			terms = append(terms, term)
			mu.Unlock()
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("Lead returned %v, waiting for %s", err, what)
		case <-time.After(5 * s.TTL):
			t.Fatalf("no term began, waiting for %s", what)
		}
	}
	wait("the first term")
	s.Drop(t, name)
	wait("a term after the first was lost")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lead after its context ended: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lead did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Fatalf("terms %v, want two, increasing", terms)
	}
	if l, err := s.client(t).Election(name).Leader(ctx); err != nil || l.Elected {
		t.Fatalf("Leader after Lead returned: %+v, %v", l, err)
	}
}

// Lead returns what fn returns while it leads, and resigns.
func (s suite) electLeadReturns(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	e := s.client(t).Election(name)
	failed := errors.New("the work failed")
	if err := e.Lead(ctx, "once", func(context.Context, int64) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("Lead: %v, want fn's error", err)
	}
	if err := e.Lead(ctx, "once", func(context.Context, int64) error { return nil }); err != nil {
		t.Fatalf("Lead of work that is done: %v", err)
	}
	if l, err := e.Leader(ctx); err != nil || l.Elected {
		t.Fatalf("Leader after Lead returned: %+v, %v", l, err)
	}
	if err := e.Lead(ctx, "x", nil); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("Lead with a nil function: %v, want ErrInvalid", err)
	}
}

// On a backend that keeps a line, a leader's Resign hands the lock to the next contender in
// the same step: Observe reports the next term and no "no leader" before it, in every round.
// (Observe looks when the store pushes word of the hand-over, where it can.)
func (s suite) electObserveHandOver(t *testing.T) {
	if _, ok := s.New(t).(driver.Queue); !ok {
		t.Skip("the backend keeps no line: a release frees the lock before the next contender takes it")
	}
	const rounds = 8
	ctx := bounded(t, 120*time.Second)
	name := s.name(t)
	next := observe(t, ctx, s.client(t).Election(name)).next
	cur, err := s.client(t).Election(name).Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	if l := next("the first term"); l.Term != cur.Term() {
		t.Fatalf("Observe after the first term began: %+v, want term %d", l, cur.Term())
	}
	for round := 1; round <= rounds; round++ {
		inLine := make(chan struct{}, 1)
		c := s.waitingClient(t, inLine)
		won := make(chan *fencelock.Leadership, 1)
		errs := make(chan error, 1)
		value := "v" + itoa(int64(round))
		go func() {
			l, err := c.Election(name).Campaign(ctx, value)
			if err != nil {
				errs <- err
				return
			}
			won <- l
		}()
		select {
		case <-inLine:
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("round %d: the contender never waited in line", round)
		}
		if err := cur.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case cur = <-won:
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("round %d: the contender in line never led", round)
		}
		for l := next("the handed-over term"); l.Term != cur.Term(); l = next("the handed-over term") {
			if !l.Elected {
				t.Fatalf("round %d: Observe reported no leader when the lock was handed over to term %d", round, cur.Term())
			}
			if l.Term > cur.Term() {
				t.Fatalf("round %d: Observe reported term %d, want %d", round, l.Term, cur.Term())
			}
		}
	}
	if err := cur.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Proclaim changes the leader's value in place: the term stays, and Leader and Observe see the
// new value. A backend that cannot says so with errors.ErrUnsupported.
func (s suite) electProclaim(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	watcher := s.client(t).Election(name)
	next := observe(t, ctx, watcher).next
	l, err := s.client(t).Election(name).Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if o := next("the term"); o.Term != l.Term() || o.Value != "first" {
		t.Fatalf("Observe after the election: %+v, want term %d and value first", o, l.Term())
	}
	err = l.Proclaim(ctx, "second")
	if errors.Is(err, errors.ErrUnsupported) {
		if !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("Proclaim on a backend that cannot: %v, want it to match ErrInvalid too", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"second", "", "third"} {
		if v != "second" {
			if err := l.Proclaim(ctx, v); err != nil {
				t.Fatalf("Proclaim(%q): %v", v, err)
			}
		}
		if o := next("the value " + v); !o.Elected || o.Term != l.Term() || o.Value != v {
			t.Fatalf("Observe after Proclaim(%q): %+v, want term %d with that value", v, o, l.Term())
		}
		if o, err := watcher.Leader(ctx); err != nil || o.Term != l.Term() || o.Value != v {
			t.Fatalf("Leader after Proclaim(%q): %+v, %v; want term %d with that value", v, o, err, l.Term())
		}
		if l.Value() != v || l.Valid() != nil {
			t.Fatalf("after Proclaim(%q): the leadership's value %q, Valid %v", v, l.Value(), l.Valid())
		}
	}
	if err := l.Proclaim(ctx, strings.Repeat("v", fencelock.MaxMetadata+1)); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("Proclaim of a value over MaxMetadata: %v, want ErrInvalid", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if o := next("no leader"); o.Elected {
		t.Fatalf("Observe after the leader resigned: %+v", o)
	}
	if err := l.Proclaim(ctx, "late"); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Proclaim after Resign: %v, want ErrNotHeld", err)
	}
	// A Proclaim the store refuses: the lock was removed behind the leader's back.
	l, err = s.client(t).Election(name).Campaign(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	s.Drop(t, name)
	if err := l.Proclaim(ctx, "dropped"); err == nil {
		if o, err := watcher.Leader(ctx); err == nil && o.Value == "dropped" {
			t.Fatalf("Proclaim after the lock was removed published %+v", o)
		}
	} else if !errors.Is(err, fencelock.ErrNotHeld) && !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Proclaim after the lock was removed: %v, want ErrNotHeld or ErrLost", err)
	}
}

// Candidates lists the leader, then the contenders in line, first come first, with their
// values. A backend that cannot list its line lists the leader, and says errors.ErrUnsupported.
func (s suite) electCandidates(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	reader := s.client(t).Election(name)
	if got, err := reader.Candidates(ctx); len(got) != 0 || (err != nil && !errors.Is(err, errors.ErrUnsupported)) {
		t.Fatalf("Candidates of an election no one campaigns in: %+v, %v", got, err)
	}
	leader, err := s.client(t).Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.Candidates(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		if len(got) != 1 || !got[0].Leader || got[0].Term != leader.Term() {
			t.Fatalf("Candidates on a backend without a line: %+v, want the leader", got)
		}
		_ = leader.Resign(ctx)
		t.Skip(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	won := make(chan *fencelock.Leadership, 2)
	for _, v := range []string{"b", "c"} {
		inLine := make(chan struct{}, 1)
		c := s.waitingClient(t, inLine)
		go func() {
			if l, err := c.Election(name).Campaign(cctx, v); err == nil {
				won <- l
			}
		}()
		select {
		case <-inLine:
		case <-ctx.Done():
			t.Fatalf("contender %s never waited in line", v)
		}
	}
	want := func(what string, term int64, values ...string) {
		t.Helper()
		got, err := reader.Candidates(ctx)
		if err != nil {
			t.Fatalf("Candidates %s: %v", what, err)
		}
		var vs []string
		for i, c := range got {
			vs = append(vs, c.Value)
			if c.Leader != (i == 0) || (i == 0 && c.Term != term) || (i > 0 && c.Term != 0) || c.Owner == "" {
				t.Fatalf("Candidates %s: %+v, want the leader of term %d first", what, got, term)
			}
		}
		if strings.Join(vs, ",") != strings.Join(values, ",") {
			t.Fatalf("Candidates %s: values %v, want %v (%+v)", what, vs, values, got)
		}
	}
	want("with a leader and two in line", leader.Term(), "a", "b", "c")
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-won
	want("after the hand-over", next.Term(), "b", "c")
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	last := <-won
	want("with the last contender", last.Term(), "c")
	if err := last.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
