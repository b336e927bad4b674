package redisconn_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/redisconn"
	"github.com/fencelock/fencelock/redisconn/redisconntest"
)

func TestGoRedis(t *testing.T) {
	redisconntest.Run(t, func(t *testing.T, d redisconntest.Deployment) redisconn.Conn {
		var c redis.UniversalClient
		switch d.Kind {
		case redisconntest.Cluster:
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Addrs, ContextTimeoutEnabled: true})
		case redisconntest.Sentinel:
			c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.MasterName, SentinelAddrs: d.Addrs, ContextTimeoutEnabled: true})
		default:
			c = redis.NewClient(&redis.Options{Addr: d.Addrs[0], ContextTimeoutEnabled: true})
		}
		t.Cleanup(func() { _ = c.Close() })
		conn, err := redisconn.Of(c)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	})
}

// Of refuses what is not a Redis client, with an error that names it.
func TestOfRefuses(t *testing.T) {
	var nilClient *redis.Client
	for _, tc := range []struct {
		what string
		c    any
		says string
	}{
		{"nil", nil, "nil redis client"},
		{"a typed nil", nilClient, "nil redis client"},
		{"options", &redis.Options{}, "*redis.Options is not a Redis client"},
		{"a string", "127.0.0.1:6379", "string is not a Redis client"},
	} {
		_, err := redisconn.Of(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want an error that says %q", tc.what, err, tc.says)
		}
	}
	if _, err := redisconn.Of(&redis.Options{}); !errors.Is(err, redisconn.ErrNotAClient) {
		t.Errorf("got %v, want ErrNotAClient", err)
	}
}
