package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// watchdogRow is one library holding many locks and renewing them.
type watchdogRow struct {
	label        string
	locks        int
	interval     time.Duration
	intervals    int
	roundTrips   float64 // per interval; -1 when not counted
	scripts      float64 // per interval: EVAL and EVALSHA calls the server ran
	commands     float64 // per interval, counted by the server, those inside scripts too
	clientCPU    time.Duration
	serverCPU    time.Duration // per interval
	heapPerLock  float64       // Go heap and stacks, bytes per held lock
	redisPerLock float64       // server used_memory, bytes per held lock
	obtainTime   time.Duration // to obtain them all
	lost         int
	note         string
	obtainErr    error // why fewer than the locks asked for were obtained
}

// roundTrips counts a go-redis client's round trips: one per command sent alone, one per
// pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// holder is what the watchdog scenario needs from a library: hold many locks, say how many
// were lost, give them up.
type holder interface {
	obtain(ctx context.Context, name string) error
	lost() int
	releaseAll(ctx context.Context) error
	roundTrips() int64 // -1 when the library's client cannot be counted
	close()
}

// runWatchdog holds cfg.watchdogLocks locks with TTL cfg.watchdogTTL in one client, lets the
// library renew them for cfg.watchdogIntervals renewal intervals (TTL/3, fencelock's
// default), and measures what that costs per interval. rueidislock, the other library here
// with automatic renewal, runs alongside with the same TTL and interval (KeyMajority 1).
func runWatchdog(ctx context.Context, cfg *config, srv *server) ([]watchdogRow, error) {
	every := cfg.watchdogTTL / 3
	makers := []struct {
		label string
		make  func() (holder, error)
		note  string
	}{
		{"fencelock", func() (holder, error) { return newFencelockHolder(srv.Addr, cfg.watchdogTTL), nil },
			"TTL " + cfg.watchdogTTL.String() + ", renewed every TTL/3 (the default) by one scheduler per client, due renewals batched in a pipeline; " +
				"each renewal also makes the server push an invalidation to the loss watch, which reads the key again (GET, or HMGET for a hash; 256 to a pipeline) on a connection of its own that the round trips leave out, but the server's commands, CPU and memory count"},
		{"fencelock (WithLossWatch(false))", func() (holder, error) {
			return newFencelockHolder(srv.Addr, cfg.watchdogTTL, redisbackend.WithLossWatch(false)), nil
		}, "the same without the loss watch: losses are learned at the renewals"},
		{"rueidislock (KeyMajority 1, NoLoopTracking)", func() (holder, error) { return newRueidisHolder(srv.Addr, cfg.watchdogTTL, every, true) },
			"KeyValidity " + cfg.watchdogTTL.String() + ", ExtendInterval " + every.String() + ": a goroutine and a timer per lock, auto-pipelined; NoLoopTracking (Redis 7.0.5 and later) keeps the client from hearing of its own writes"},
		{"rueidislock (KeyMajority 1)", func() (holder, error) { return newRueidisHolder(srv.Addr, cfg.watchdogTTL, every, false) },
			"the same without NoLoopTracking, its default: each extension writes a key the client tracks, the server tells the client, and the client extends again at once, so every held lock keeps extending in a loop after its first interval"},
	}
	var rows []watchdogRow
	for _, m := range makers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := srv.admin.FlushAll(ctx).Err(); err != nil {
			return nil, err
		}
		h, err := m.make()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.label, err)
		}
		row, err := holdMany(ctx, cfg, srv, h, every)
		cfg.progress("watchdog: %s: measured; closing", m.label)
		h.close()
		cfg.progress("watchdog: %s: closed", m.label)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.label, err)
		}
		row.label, row.note = m.label, m.note
		rows = append(rows, row)
	}
	return rows, nil
}

func holdMany(ctx context.Context, cfg *config, srv *server, h holder, every time.Duration) (watchdogRow, error) {
	row := watchdogRow{locks: cfg.watchdogLocks, interval: every, intervals: cfg.watchdogIntervals}
	names := make([]string, cfg.watchdogLocks)
	for i := range names {
		names[i] = "wd:" + strconv.Itoa(i)
	}
	mem0, err := memorySnapshot(ctx, srv)
	if err != nil {
		return row, err
	}
	start := time.Now()
	for i, name := range names {
		if err := h.obtain(ctx, name); err != nil {
			if ctx.Err() != nil {
				return row, err
			}
			// Measure what the library holds so far: a library that cannot obtain more
			// while it renews the ones it holds is a finding, not a reason to stop the run.
			row.obtainErr = fmt.Errorf("obtained %d of %d locks, then: %w", i, row.locks, err)
			row.locks = i
			break
		}
	}
	row.obtainTime = time.Since(start)
	cfg.progress("watchdog: obtained %d locks in %v", row.locks, row.obtainTime.Round(time.Millisecond))
	if row.locks == 0 {
		return row, nil
	}
	defer func() {
		_ = h.releaseAll(context.WithoutCancel(ctx))
		cfg.progress("watchdog: released them")
	}()
	// One whole interval after the last obtain, every lock has been renewed at least once and
	// the renewals run in their steady rhythm.
	if err := sleep(ctx, every); err != nil {
		return row, err
	}
	mem1, err := memorySnapshot(ctx, srv)
	if err != nil {
		return row, err
	}
	row.heapPerLock = float64(int64(mem1.heap)-int64(mem0.heap)) / float64(row.locks)
	row.redisPerLock = (mem1.redis - mem0.redis) / float64(row.locks)

	s0, err := serverSnapshot(ctx, srv)
	if err != nil {
		return row, err
	}
	rt0, cpu0 := h.roundTrips(), cpuTime()
	if err := sleep(ctx, time.Duration(row.intervals)*every); err != nil {
		return row, err
	}
	rt1, cpu1 := h.roundTrips(), cpuTime()
	s1, err := serverSnapshot(ctx, srv)
	if err != nil {
		return row, err
	}
	n := float64(row.intervals)
	row.roundTrips = -1
	if rt0 >= 0 {
		row.roundTrips = float64(rt1-rt0) / n
	}
	// The server counts the first INFO among the commands the second one reports.
	row.commands = (s1.commands - s0.commands - 1) / n
	row.scripts = (s1.scripts - s0.scripts) / n
	row.clientCPU = time.Duration((cpu1 - cpu0) / n * 1e9)
	row.serverCPU = time.Duration((s1.cpu - s0.cpu) / n * 1e9)
	row.lost = h.lost()
	return row, nil
}

type memSnap struct {
	heap  uint64
	redis float64
}

func memorySnapshot(ctx context.Context, srv *server) (memSnap, error) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	used, err := info(ctx, srv.admin, "memory", "used_memory")
	return memSnap{heap: m.HeapInuse + m.StackInuse, redis: used}, err
}

type serverSnap struct{ commands, scripts, cpu float64 }

func serverSnapshot(ctx context.Context, srv *server) (serverSnap, error) {
	text, err := srv.admin.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return serverSnap{}, err
	}
	var s serverSnap
	for _, cmd := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro"} {
		if v, ok := infoText(text, "cmdstat_"+cmd); ok {
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.ParseFloat(calls, 64)
			if err != nil {
				return s, fmt.Errorf("INFO commandstats: %s: %q", cmd, v)
			}
			s.scripts += n
		}
	}
	v, ok := infoField(text, "total_commands_processed")
	if !ok {
		return s, fmt.Errorf("INFO has no field total_commands_processed")
	}
	s.commands, s.cpu = v, procCPU(srv.PID())
	return s, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type fencelockHolder struct {
	rdb    *redis.Client
	b      *redisbackend.Backend
	rt     *roundTrips
	locker *fencelock.Client
	ttl    time.Duration
	locks  []*fencelock.Lock
}

func newFencelockHolder(addr string, ttl time.Duration, opts ...redisbackend.Option) *fencelockHolder {
	rdb := newGoRedis(addr)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	b := redisbackend.New(rdb, opts...)
	return &fencelockHolder{rdb: rdb, b: b, rt: rt, locker: fencelock.New(b), ttl: ttl}
}

func (f *fencelockHolder) obtain(ctx context.Context, name string) error {
	l, err := f.locker.TryObtain(ctx, name, fencelock.WithTTL(f.ttl))
	if err == nil {
		f.locks = append(f.locks, l)
	}
	return err
}

func (f *fencelockHolder) lost() int {
	n := 0
	for _, l := range f.locks {
		if l.Valid() != nil {
			n++
		}
	}
	return n
}

func (f *fencelockHolder) releaseAll(ctx context.Context) error {
	var first error
	for _, l := range f.locks {
		if err := l.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	f.locks = nil
	return first
}

func (f *fencelockHolder) roundTrips() int64 { return f.rt.n.Load() }

func (f *fencelockHolder) close() {
	_ = f.locker.Close()
	_ = f.b.Close()
	_ = f.rdb.Close()
}

type rueidisHolder struct {
	locker rueidislock.Locker
	held   []rueidisLock
}

type rueidisLock struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newRueidisHolder(addr string, ttl, every time.Duration, noLoop bool) (*rueidisHolder, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		KeyValidity:    ttl,
		ExtendInterval: every,
		NoLoopTracking: noLoop,
	})
	if err != nil {
		return nil, err
	}
	return &rueidisHolder{locker: l}, nil
}

func (r *rueidisHolder) obtain(ctx context.Context, name string) error {
	lctx, cancel, err := r.locker.TryWithContext(context.WithoutCancel(ctx), name)
	if err == nil {
		r.held = append(r.held, rueidisLock{lctx, cancel})
	}
	return err
}

func (r *rueidisHolder) lost() int {
	n := 0
	for _, l := range r.held {
		if l.ctx.Err() != nil {
			n++
		}
	}
	return n
}

// releaseAll releases the locks all at once: one by one, each release of the looping default
// setting waits its turn behind every other lock's extensions, which takes minutes.
func (r *rueidisHolder) releaseAll(context.Context) error {
	var wg sync.WaitGroup
	for _, l := range r.held {
		wg.Go(l.cancel)
	}
	wg.Wait()
	r.held = nil
	return nil
}

func (r *rueidisHolder) roundTrips() int64 { return -1 }

func (r *rueidisHolder) close() { r.locker.Close() }
