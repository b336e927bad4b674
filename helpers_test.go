package fencelock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/redisbackend"
)

func addInt32(p *int32, d int32) int32 { return atomic.AddInt32(p, d) }

// waitListening waits until a waiter for name, of a Client with the default key prefix, stands
// in the Redis line and listens for its grant (see listening): from then on a release hands it
// the lock while it sleeps.
func waitListening(t testing.TB, rdb redis.UniversalClient, name string) {
	t.Helper()
	key := redisbackend.New(rdb).Key(name)
	waitFor(t, 10*time.Second, "a waiter for "+name+" listening in line", func() bool { return listening(rdb, key) })
}

// listening reports whether a waiter for the lock at key listens for its grant: a channel
// <key>:g:<backend ID> has a subscriber on the lock's master (a sharded one on a Cluster). A
// waiter subscribes there once it stands in line.
func listening(rdb redis.UniversalClient, key string) bool {
	ctx := context.Background()
	pattern := globEscape(key) + ":g:*"
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return false
		}
		chans, err := master.PubSubShardChannels(ctx, pattern).Result()
		return err == nil && len(chans) > 0
	}
	chans, err := rdb.PubSubChannels(ctx, pattern).Result()
	return err == nil && len(chans) > 0
}

// globEscape quotes the characters a Redis glob pattern gives a meaning.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
