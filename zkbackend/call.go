package zkbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// go-zookeeper's requests take no context: each waits for its reply, or for go-zookeeper to
// give up on the connection — the next redial, a second apart, on a broken one; two thirds of
// the session timeout on a silent one. Every request a call makes goes through run, which
// returns once the call's context ends, so that the call returns by its deadline. The request
// goes on in a goroutine of the Backend's until go-zookeeper answers it. A write cut short
// this way may still be made: whoever made it owes what undoes it, to be done once the write
// has its answer (the pending write of settle.Ledger.Owe).

// abandoned is the error of a request whose caller stopped waiting for it.
type abandoned struct {
	err  error           // the context's
	done <-chan struct{} // closed once the request has its answer
}

func (e *abandoned) Error() string { return e.err.Error() }
func (e *abandoned) Unwrap() error { return e.err }

// inFlight returns the channel that closes once the request that err abandoned has its
// answer, or nil when err is not an abandoned request.
func inFlight(err error) <-chan struct{} {
	var a *abandoned
	if errors.As(err, &a) {
		return a.done
	}
	return nil
}

// run makes req, a go-zookeeper request, and returns its answer, or an *abandoned error once
// ctx ends first. A context that cannot end makes the request in the caller's goroutine.
func run[T any](b *Backend, ctx context.Context, req func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return req()
	}
	type answer struct {
		v   T
		err error
	}
	answered := make(chan answer, 1)
	done := make(chan struct{})
	b.flights.start()
	go func() {
		defer b.flights.end()
		defer close(done)
		v, err := req()
		answered <- answer{v, err}
	}()
	select {
	case a := <-answered:
		return a.v, a.err
	case <-ctx.Done():
		select {
		case a := <-answered: // both at once: the answer says more
			return a.v, a.err
		default:
		}
		return zero, &abandoned{err: ctx.Err(), done: done}
	}
}

// The requests the backend makes, each bounded by its context.

type dataStat struct {
	data []byte
	stat *zk.Stat
}

func (b *Backend) children(ctx context.Context, path string) ([]string, error) {
	return run(b, ctx, func() ([]string, error) {
		c, _, err := b.conn.Children(path)
		return c, err
	})
}

func (b *Backend) childrenW(ctx context.Context, path string) ([]string, <-chan zk.Event, error) {
	type watched struct {
		children []string
		watch    <-chan zk.Event
	}
	r, err := run(b, ctx, func() (watched, error) {
		c, _, w, err := b.conn.ChildrenW(path)
		return watched{c, w}, err
	})
	return r.children, r.watch, err
}

func (b *Backend) get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	r, err := run(b, ctx, func() (dataStat, error) {
		d, s, err := b.conn.Get(path)
		return dataStat{d, s}, err
	})
	return r.data, r.stat, err
}

func (b *Backend) getW(ctx context.Context, path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	type watched struct {
		dataStat
		watch <-chan zk.Event
	}
	r, err := run(b, ctx, func() (watched, error) {
		d, s, w, err := b.conn.GetW(path)
		return watched{dataStat{d, s}, w}, err
	})
	return r.data, r.stat, r.watch, err
}

func (b *Backend) set(ctx context.Context, path string, data []byte, version int32) (*zk.Stat, error) {
	return run(b, ctx, func() (*zk.Stat, error) { return b.conn.Set(path, data, version) })
}

func (b *Backend) multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	return run(b, ctx, func() ([]zk.MultiResponse, error) { return b.conn.Multi(ops...) })
}

func (b *Backend) create(ctx context.Context, path string, data []byte, flags int32) (string, error) {
	return run(b, ctx, func() (string, error) { return b.conn.Create(path, data, flags, b.acl) })
}

func (b *Backend) delete(ctx context.Context, path string, version int32) error {
	_, err := run(b, ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(path, version) })
	return err
}

// exists and sync ask through conn, which may be another Backend's (see sessions.go).
func (b *Backend) exists(ctx context.Context, conn *zk.Conn, path string) (bool, *zk.Stat, error) {
	type found struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := run(b, ctx, func() (found, error) {
		ok, s, err := conn.Exists(path)
		return found{ok, s}, err
	})
	return r.ok, r.stat, err
}

func (b *Backend) sync(ctx context.Context, conn *zk.Conn, path string) error {
	_, err := run(b, ctx, func() (string, error) { return conn.Sync(path) })
	return err
}

// flights counts a Backend's goroutines, requests whose callers stopped waiting among them,
// but the settler, which its ledger of owed work keeps (internal/settle). Close waits for them
// and for the settler. (A WaitGroup would not do: a request may start while Close waits.)
type flights struct {
	mu    sync.Mutex
	n     int
	empty chan struct{} // closed when n drops to zero; nil until someone waits
}

func (f *flights) start() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *flights) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 && f.empty != nil {
		close(f.empty)
		f.empty = nil
	}
}

// wait waits until no goroutine is left or until deadline, and reports whether none is left.
func (f *flights) wait(deadline time.Time) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	if f.empty == nil {
		f.empty = make(chan struct{})
	}
	empty := f.empty
	f.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-empty:
		return true
	case <-t.C:
		return false
	}
}

func (b *Backend) existsW(ctx context.Context, path string) (bool, <-chan zk.Event, error) {
	type watched struct {
		ok    bool
		watch <-chan zk.Event
	}
	r, err := run(b, ctx, func() (watched, error) {
		ok, _, w, err := b.conn.ExistsW(path)
		return watched{ok, w}, err
	})
	return r.ok, r.watch, err
}
