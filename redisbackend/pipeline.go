package redisbackend

import (
	"context"
	"sync"
	"time"

	"github.com/fencelock/fencelock/redisconn"
)

// A pipeliner sends script calls on their own while few are in flight, and sends the calls
// that arrive while many are in flight together, as one pipeline, as soon as a send ends:
// many goroutines locking at once then share round trips, and the client and the server make
// one read and one write for a whole batch instead of one each per call. A lone caller pays
// nothing for it.
//
// A call sent alone runs on its caller's goroutine. A batch is sent by a goroutine of its own,
// started when a send ends with calls queued, which sends the next batch in turn; every call of
// a batch returns by its own context's end, as a call sent alone does, with its outcome
// unknown when the batch was sent and had not come back. Close waits for the batches.
type pipeliner struct {
	c   redisconn.Conn
	max int // sends in flight at most: one call each, or one batch

	mu       sync.Mutex
	inflight int
	queue    []*call
	batches  sync.WaitGroup
}

// A call is one script call waiting in the queue.
type call struct {
	ctx    context.Context
	script *redisconn.Script
	keys   []string
	args   []any
	reply  any
	err    error
	done   chan struct{} // closed when reply and err are set
}

// maxBatch bounds a batch; the rest of the queue goes with the next send that ends. Small
// batches keep several sends in flight, so that the server runs one while the client reads
// the replies of another. A batch of the whole queue (up to 128, before December 2026) left
// client and server each idle while the other worked: 32 goroutines on one client made 0.73×
// the floor's cycles, bsm/redislock 0.98×; with batches of at most 4, 1.07× (bsm/redislock
// 1.04×), and 1.08× with 128 goroutines (0.96×). Batches of 1, 2, 8 and 16 made 0.56×, 0.88×,
// 0.92× and 0.87× (go run ./bench -scenarios throughput, one run each, 5 December 2026).
const maxBatch = 4

// run runs script as Conn.Eval does, alone or in a batch.
func (p *pipeliner) run(ctx context.Context, script *redisconn.Script, keys []string, args ...any) (any, error) {
	if p.max <= 0 {
		return p.c.Eval(ctx, script, keys, args...)
	}
	p.mu.Lock()
	if p.inflight < p.max {
		p.inflight++
		p.mu.Unlock()
		reply, err := p.c.Eval(ctx, script, keys, args...)
		p.handOn()
		return reply, err
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	for i, q := range p.queue {
		if q == c {
			// Never sent: the caller knows the call had no effect.
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	p.mu.Unlock()
	select {
	case <-c.done: // it came back meanwhile
		return c.reply, c.err
	default:
	}
	// In a batch on its way: the script may run or have run, as for a call sent alone whose
	// context ended.
	return nil, ctx.Err()
}

// handOn ends a send: the queue, if any, goes out as one batch on a goroutine of its own, and
// the slot passes with it; otherwise the slot is free.
func (p *pipeliner) handOn() {
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.inflight--
		p.mu.Unlock()
		return
	}
	n := min(len(p.queue), maxBatch)
	batch := p.queue[:n:n]
	p.queue = append([]*call(nil), p.queue[n:]...)
	p.batches.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.batches.Done()
		p.send(batch)
		p.handOn()
	}()
}

// send sends a batch as one pipeline and signals every call. Its context carries the first
// call's values and no cancellation: the calls of other callers ride on it. It ends at the
// latest deadline in the batch, if all have one; each caller stops waiting at its own.
func (p *pipeliner) send(batch []*call) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	calls := make([]redisconn.Call, len(batch))
	for k, c := range batch {
		calls[k] = redisconn.Call{Script: c.script, Keys: c.keys, Args: c.args}
	}
	p.c.EvalBatch(ctx, calls)
	for k, c := range batch {
		c.reply, c.err = calls[k].Reply, calls[k].Err
		close(c.done)
	}
}

// wait waits for the batches on their way.
func (p *pipeliner) wait() { p.batches.Wait() }
