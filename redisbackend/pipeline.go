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
// No goroutine of its own does the sending: a call that finds every slot taken waits in the
// queue; a send that ends hands the queue, as one batch, to the goroutine of its first call,
// which sends it and hands on in turn.
type pipeliner struct {
	c   redisconn.Conn
	max int // sends in flight at most: one call each, or one batch

	mu       sync.Mutex
	inflight int
	queue    []*call
}

// A call is one script call waiting in the queue.
type call struct {
	ctx    context.Context
	script *redisconn.Script
	keys   []string
	args   []any
	reply  any
	err    error
	batch  []*call       // set for the first call of a batch: its goroutine sends the batch
	done   chan struct{} // one signal: reply and err are set, or batch is to be sent
}

// maxBatch bounds a batch; the rest of the queue goes in the next.
const maxBatch = 128

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
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{}, 1)}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		p.mu.Lock()
		for i, q := range p.queue {
			if q == c {
				// Never sent: the caller may stop waiting, and knows the call had no effect.
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				p.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		p.mu.Unlock()
		// In a batch already: its outcome comes within the batch's deadline, and is better
		// known than guessed.
		<-c.done
	}
	if c.batch != nil {
		p.send(c.batch)
		p.handOn()
	}
	return c.reply, c.err
}

// handOn ends a send: the queue, if any, goes to its first call's goroutine as one batch, and
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
	batch[0].batch = batch
	p.mu.Unlock()
	batch[0].done <- struct{}{}
}

// send sends a batch as one pipeline and signals every call but the first, whose goroutine
// is the sender. Its context carries the first call's values and no cancellation: the calls
// of other callers ride on it. It ends at the latest deadline in the batch, if all have one.
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
	}
	for _, c := range batch[1:] {
		c.done <- struct{}{}
	}
}
