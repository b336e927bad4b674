package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn/rueidisconn"
)

// lossTTL is the TTL of the locks of the loss scenario: the one the issue measured renewals
// against (fencelock renews every TTL/3, rueidislock its keys every KeyValidity/2).
const lossTTL = 2 * time.Second

// lossRow is how soon one library tells a holder that its lock's key was deleted.
type lossRow struct {
	label    string
	samples  int
	p50, p99 time.Duration
	missed   int // holders not told within lossTTL + 1 s
	note     string
	err      error
}

// lossHolder is what the loss scenario needs from a library: hold name and say when it is
// lost, and the key a DEL must remove to take the lock away.
type lossHolder struct {
	label string
	note  string
	hold  func(ctx context.Context, name string) (lost <-chan struct{}, release func(), err error)
	key   func(name string) string
	close func()
}

// runLoss holds a lock, waits 50 ms (fencelock asks for its watch 10 ms into a hold), deletes
// the lock's key with another client, and times how long the holder takes to learn of it: by
// push where the library has one, at its next renewal where not. The libraries take turns,
// sample by sample.
func runLoss(ctx context.Context, cfg *config, srv *server) ([]lossRow, error) {
	addr := srv.Addr
	var hs []lossHolder
	defer func() { // every holder made, also when a later one fails
		for _, h := range hs {
			h.close()
		}
	}()
	rdb := newGoRedis(addr)
	fb := redisbackend.New(rdb)
	fl := fencelock.New(fb)
	hs = append(hs, lossHolder{label: "fencelock", note: "go-redis client: CLIENT TRACKING on a connection pair of its own, then one GET of the key (HMGET where the lock is a hash)",
		hold: fencelockLossHold(fl), key: fb.Key,
		close: func() { _ = fl.Close(); _ = fb.Close(); _ = rdb.Close() }})
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	rb := redisbackend.New(rueidisconn.New(rc))
	fr := fencelock.New(rb)
	hs = append(hs, lossHolder{label: "fencelock (" + rueidisSetting + ")", note: "the adapter has no tracking session: the holder learns at its next renewal (TTL/3)",
		hold: fencelockLossHold(fr), key: rb.Key,
		close: func() { _ = fr.Close(); _ = rb.Close(); rc.Close() }})
	rl, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1, KeyValidity: lossTTL,
	})
	if err != nil {
		return nil, err
	}
	hs = append(hs, lossHolder{label: "rueidislock KeyMajority 1", note: "KeyValidity 2s; client-side caching of its key",
		hold: func(ctx context.Context, name string) (<-chan struct{}, func(), error) {
			lctx, cancel, err := rl.TryWithContext(ctx, name)
			if err != nil {
				return nil, nil, err
			}
			return lctx.Done(), cancel, nil
		},
		key:   func(name string) string { return "rueidislock:0:" + name },
		close: rl.Close})
	told := make([][]time.Duration, len(hs))
	rows := make([]lossRow, len(hs))
	for i, h := range hs {
		rows[i] = lossRow{label: h.label, note: h.note}
	}
	for s := range cfg.lossSamples {
		for i, h := range hs {
			if rows[i].err != nil {
				continue
			}
			d, ok, err := lossSample(ctx, srv.admin, h, fmt.Sprintf("loss:%d:%d", i, s))
			switch {
			case err != nil:
				rows[i].err = err
			case ok:
				told[i] = append(told[i], d)
			default:
				rows[i].missed++
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	for i := range rows {
		ds := told[i]
		slices.Sort(ds)
		rows[i].samples = len(ds)
		if len(ds) > 0 {
			rows[i].p50, rows[i].p99 = ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
		}
	}
	return rows, nil
}

func fencelockLossHold(c *fencelock.Client) func(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return func(ctx context.Context, name string) (<-chan struct{}, func(), error) {
		l, err := c.TryObtain(ctx, name, fencelock.WithTTL(lossTTL))
		if err != nil {
			return nil, nil, err
		}
		return l.Context().Done(), func() { _ = l.Release(context.Background()) }, nil
	}
}

// lossSample takes one measurement: ok is false when the holder was not told in time.
func lossSample(ctx context.Context, admin *redis.Client, h lossHolder, name string) (time.Duration, bool, error) {
	lost, release, err := h.hold(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", h.label, err)
	}
	defer release()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if n, err := admin.Del(ctx, h.key(name)).Result(); err != nil || n != 1 {
		return 0, false, fmt.Errorf("%s: DEL %s = %d, %v: want the lock's key deleted", h.label, h.key(name), n, err)
	}
	select {
	case <-lost:
		return time.Since(start), true, nil
	case <-time.After(lossTTL + time.Second):
		return 0, false, nil
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}
