package safety

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn/rueidisconn"
	"github.com/fencelock/fencelock/redisconn/valkeyconn"
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
		// The go-redis clients also reach the servers behind the library's back.
		var clients []*redis.Client
		var nodes []redisbackend.Client
		var closers []func()
		for _, a := range cfg.Addrs {
			c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
			clients = append(clients, c)
			closers = append(closers, func() { _ = c.Close() })
			node, closeNode, err := nemesisClient(cfg.Client, a, c)
			if err != nil {
				for _, f := range closers {
					f()
				}
				return nil, err
			}
			nodes = append(nodes, node)
			closers = append(closers, closeNode)
		}
		nb := &nemesisBackend{direct: clients[0], close: func() {
			for _, f := range closers {
				f()
			}
		}}
		var key func(string) string
		if cfg.Backend == "redis" {
			rb := redisbackend.New(nodes[0])
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

// nemesisClient returns the Redis client a worker's backend runs on for one server: the
// go-redis client c itself, or a rueidis or valkey-go client through its adapter, with what
// closes it.
func nemesisClient(kind, addr string, c *redis.Client) (redisbackend.Client, func(), error) {
	switch kind {
	case "", "go-redis":
		return c, func() {}, nil
	case "rueidis":
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, nil, err
		}
		return rueidisconn.New(rc), rc.Close, nil
	case "valkey-go":
		vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, nil, err
		}
		return valkeyconn.New(vc), vc.Close, nil
	}
	return nil, nil, errors.New("safety: unknown Redis client " + kind)
}

// silentZK drops go-zookeeper's log lines: a worker's output is its events.
type silentZK struct{}

func (silentZK) Printf(string, ...any) {}
