package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
)

// The election scenario: fencelock's Election over etcdbackend beside what a Go team on etcd
// uses today, etcd's own concurrency.Election, on one etcd member started in this process.
// Two figures: a campaign and a resignation with no one else in the race, interleaved cycle
// by cycle, and the hand-over: a leader resigns while another candidate waits, and the figure
// is the time from the resignation's start to the waiting candidate's Campaign returning.

// electionTTL is the leadership's TTL: a lease of etcd's.
const electionTTL = 10 * time.Second

// electionRow is one contender's figures.
type electionRow struct {
	label, note       string
	samples, handoffs int
	p50, p99          time.Duration // campaign and resign, uncontended
	handP50, handP99  time.Duration // resign to the next leader's return
	failures          int
	firstErr          error
}

// elector campaigns and resigns.
type elector struct {
	label, note string
	// campaign waits until elected, and returns the resignation.
	campaign func(ctx context.Context, name, value string) (resign func(context.Context) error, err error)
	close    func()
}

func newElectors(endpoints []string) ([]elector, error) {
	dial := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	var out []elector
	fail := func(err error) ([]elector, error) {
		for _, e := range out {
			e.close()
		}
		return nil, err
	}
	fc, err := dial()
	if err != nil {
		return fail(err)
	}
	b := etcdbackend.New(fc)
	locker := fencelock.New(b)
	out = append(out, elector{label: "fencelock Election (etcdbackend)", note: "a key on the backend's session lease per candidate; the term is its create revision; Leadership's context ends on loss",
		campaign: func(ctx context.Context, name, value string) (func(context.Context) error, error) {
			l, err := locker.Election(name, fencelock.WithTTL(electionTTL)).Campaign(ctx, value)
			if err != nil {
				return nil, err
			}
			return l.Resign, nil
		},
		close: func() { _ = locker.Close(); _ = b.Close(); _ = fc.Close() }})
	ec, err := dial()
	if err != nil {
		return fail(err)
	}
	session, err := concurrency.NewSession(ec, concurrency.WithTTL(int(electionTTL/time.Second)))
	if err != nil {
		_ = ec.Close()
		return fail(err)
	}
	out = append(out, elector{label: "etcd concurrency.Election", note: "one session (lease) for the candidate; NewElection per campaign, as a candidate of each race would",
		campaign: func(ctx context.Context, name, value string) (func(context.Context) error, error) {
			e := concurrency.NewElection(session, "/bench-election/"+name)
			if err := e.Campaign(ctx, value); err != nil {
				return nil, err
			}
			return e.Resign, nil
		},
		close: func() { _ = session.Close(); _ = ec.Close() }})
	return out, nil
}

// runElection starts one etcd member, and times each contender's campaign and resignation
// uncontended, then its hand-overs: one candidate of the contender leads, a second one of the
// same contender waits, and the leader resigns.
func runElection(ctx context.Context, cfg *config) ([]electionRow, error) {
	cl, err := etcdtest.New(etcdtest.Options{})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	leaders, err := newElectors(cl.Endpoints)
	if err != nil {
		return nil, err
	}
	defer closeElectors(leaders)
	waiters, err := newElectors(cl.Endpoints)
	if err != nil {
		return nil, err
	}
	defer closeElectors(waiters)
	rows := make([]electionRow, len(leaders))
	lat := make([]durations, len(leaders))
	hand := make([]durations, len(leaders))
	samples := max(cfg.cycles/40, 5)
	for i, e := range leaders {
		rows[i].label, rows[i].note = e.label, e.note
		if err := electCycle(ctx, e, "warm"); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", e.label, err)
		}
	}
	for s := range samples {
		for i, e := range leaders {
			start := time.Now()
			if err := electCycle(ctx, e, "lat-"+strconv.Itoa(s%16)); err != nil {
				rows[i].failures++
				if rows[i].firstErr == nil {
					rows[i].firstErr = err
				}
				continue
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	handoffs := max(cfg.handoffs/4, 3)
	for s := range handoffs {
		for i := range leaders {
			d, err := electHandoff(ctx, leaders[i], waiters[i], "hand-"+strconv.Itoa(s))
			if err != nil {
				rows[i].failures++
				if rows[i].firstErr == nil {
					rows[i].firstErr = err
				}
				continue
			}
			hand[i] = append(hand[i], d)
		}
	}
	for i := range rows {
		s, h := lat[i].sorted(), hand[i].sorted()
		rows[i].samples, rows[i].p50, rows[i].p99 = len(s), s.quantile(0.5), s.quantile(0.99)
		rows[i].handoffs, rows[i].handP50, rows[i].handP99 = len(h), h.quantile(0.5), h.quantile(0.99)
	}
	return rows, nil
}

func closeElectors(es []elector) {
	for _, e := range es {
		e.close()
	}
}

func electCycle(ctx context.Context, e elector, name string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resign, err := e.campaign(cctx, name, "bench")
	if err != nil {
		return err
	}
	return resign(cctx)
}

// electHandoff makes leader lead name, waiter campaign behind it, and times from the leader's
// resignation to the waiter's election.
func electHandoff(ctx context.Context, leader, waiter elector, name string) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resign, err := leader.campaign(cctx, name, "first")
	if err != nil {
		return 0, err
	}
	type won struct {
		at     time.Time
		resign func(context.Context) error
		err    error
	}
	next := make(chan won, 1)
	go func() {
		r, err := waiter.campaign(cctx, name, "second")
		next <- won{time.Now(), r, err}
	}()
	// The waiter is in the race once its key is in place; a moment is enough on one member.
	time.Sleep(50 * time.Millisecond)
	select {
	case w := <-next:
		if w.err == nil {
			_ = w.resign(cctx)
		}
		_ = resign(cctx)
		return 0, errors.Join(errors.New("the second candidate was elected while the first led"), w.err)
	default:
	}
	start := time.Now()
	if err := resign(cctx); err != nil {
		return 0, err
	}
	w := <-next
	if w.err != nil {
		return 0, w.err
	}
	d := w.at.Sub(start)
	return d, w.resign(cctx)
}

// electionSection is the report's section of the election scenario.
func (r *report) electionSection(sb *strings.Builder) {
	if len(r.election) == 0 {
		return
	}
	fmt.Fprintf(sb, "## 9. Leader election on etcd\n\n"+
		"fencelock's Election over etcdbackend beside etcd's own `concurrency.Election`, on one etcd\n"+
		"member started in this program (fsync on, data in a temporary directory), leadership TTL %v.\n"+
		"Campaign and resign: one candidate alone, the contenders interleaved cycle by cycle.\n"+
		"Hand-over: a candidate leads, a second one campaigns behind it, and the leader resigns; the\n"+
		"figure runs from the resignation's start to the second one's Campaign returning.\n\n", electionTTL)
	fl := r.election[0]
	var rows [][]string
	for _, e := range r.election {
		rows = append(rows, []string{e.label, fmt.Sprint(e.samples), ms(e.p50), ms(e.p99), ratio(float64(e.p50), float64(fl.p50)),
			fmt.Sprint(e.handoffs), ms(e.handP50), ms(e.handP99), ratio(float64(e.handP50), float64(fl.handP50)), failures(e.failures, e.firstErr)})
	}
	table(sb, []string{"contender", "samples", "campaign+resign p50", "p99", "p50 / fencelock", "hand-overs", "hand-over p50", "p99", "p50 / fencelock", "failures"}, rows)
	for _, e := range r.election {
		sb.WriteString("- " + e.label + ": " + e.note + "\n")
	}
	sb.WriteString("\n")
}
