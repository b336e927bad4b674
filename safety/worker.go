package safety

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/redisbackend"
)

// WorkerConfig is what a worker process is told, through its environment.
type WorkerConfig struct {
	ID      int           `json:"id"`
	Store   string        `json:"store"`
	Backend string        `json:"backend"` // redis://host:port or etcd://host:port
	Name    string        `json:"name"`
	TTL     time.Duration `json:"ttl"`
	Hold    time.Duration `json:"hold"` // the longest sleep between read and write
	Cycles  int           `json:"cycles"`
}

// RunWorker runs the lock-set workload and prints "ack N" to out for every addition the store
// acknowledged, and "hold <from> <to>" (Unix ns) for every time it held the lock: from the
// grant to the start of its release.
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) error {
	b, closeBackend, err := openBackend(cfg.Backend)
	if err != nil {
		return err
	}
	defer closeBackend()
	locker := fencelock.New(b)
	defer locker.Close()
	hc := &http.Client{Timeout: time.Minute}
	for i := 0; i < cfg.Cycles; i++ {
		lock, err := locker.Obtain(ctx, cfg.Name, fencelock.WithTTL(cfg.TTL))
		if err != nil {
			return fmt.Errorf("worker %d obtain: %w", cfg.ID, err)
		}
		from := time.Now()
		var r readReply
		if err := call(ctx, hc, cfg.Store+"/read", nil, &r); err != nil {
			return err
		}
		if cfg.Hold > 0 {
			time.Sleep(rand.N(cfg.Hold))
		}
		added := cfg.ID*1_000_000 + i
		var w writeReply
		req := writeRequest{Worker: cfg.ID, Token: lock.Token(), Set: append(r.Set, added), Added: added}
		if err := call(ctx, hc, cfg.Store+"/write", req, &w); err != nil {
			return err
		}
		if w.Accepted {
			fmt.Fprintf(out, "ack %d\n", added)
		}
		fmt.Fprintf(out, "hold %d %d\n", from.UnixNano(), time.Now().UnixNano())
		// After a pause the lock is gone: a failed release is part of the story, not an error.
		_ = lock.Release(context.WithoutCancel(ctx))
	}
	return nil
}

func call(ctx context.Context, hc *http.Client, url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func openBackend(raw string) (fencelock.Backend, func(), error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	switch u.Scheme {
	case "redis":
		c := redis.NewClient(&redis.Options{Addr: u.Host, ContextTimeoutEnabled: true})
		b := redisbackend.New(c)
		return b, func() { _ = b.Close(); _ = c.Close() }, nil
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(u.Host, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		b := etcdbackend.New(c)
		return b, func() { _ = b.Close(); _ = c.Close() }, nil
	}
	return nil, nil, errors.New("safety: unknown backend " + raw)
}
