package safety

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/zkbackend"
)

// nemesisBackend is a worker's connection to the backend under test, through its own proxies.
type nemesisBackend struct {
	backend fencelock.Backend
	close   func()
	// direct reaches the first Redis server behind the library's back, for broken modes;
	// nil on etcd and ZooKeeper.
	direct *redis.Client
	// deleteOwn deletes a lock's key behind the library's back (the self-delete broken mode).
	deleteOwn func(name string)
}

func openNemesisBackend(cfg nemesisWorkerConfig) (*nemesisBackend, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("safety: a nemesis worker needs at least one server address")
	}
	switch cfg.Backend {
	case "redis", "redlock":
		var clients []*redis.Client
		var nodes []redisbackend.Client
		for _, a := range cfg.Addrs {
			c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
			clients = append(clients, c)
			nodes = append(nodes, c)
		}
		nb := &nemesisBackend{direct: clients[0], close: func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}}
		var key func(string) string
		if cfg.Backend == "redis" {
			rb := redisbackend.New(clients[0])
			nb.backend, key = rb, rb.Key
			inner := nb.close // the Backend's release subscriptions go before the clients under them
			nb.close = func() { _ = rb.Close(); inner() }
		} else {
			rl := redlock.New(nodes)
			nb.backend, key = rl, rl.Key
			inner := nb.close
			nb.close = func() { _ = rl.Close(); inner() }
		}
		nb.deleteOwn = func(name string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for _, c := range clients {
				_ = c.Del(ctx, key(name)).Err()
			}
		}
		return nb, nil
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Addrs, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		eb := etcdbackend.New(c)
		return &nemesisBackend{backend: eb, close: func() { _ = eb.Close(); _ = c.Close() }}, nil
	case "zk":
		conn, _, err := zk.Connect(cfg.Addrs, cfg.Session, zk.WithLogger(silentZK{}), zk.WithDialer(net.DialTimeout))
		if err != nil {
			return nil, err
		}
		zb := zkbackend.New(conn, zkbackend.WithSessionTimeout(cfg.Session))
		return &nemesisBackend{backend: zb, close: func() { _ = zb.Close(); conn.Close() }}, nil
	}
	return nil, errors.New("safety: unknown nemesis backend " + cfg.Backend)
}

// silentZK drops go-zookeeper's log lines: a worker's output is its events.
type silentZK struct{}

func (silentZK) Printf(string, ...any) {}
