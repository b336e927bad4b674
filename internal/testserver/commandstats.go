package testserver

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandCalls returns how many times the server behind c has run the commands named (lower
// case, as INFO commandstats names them: "publish"), the calls that scripts made included.
func CommandCalls(ctx context.Context, c *redis.Client, names ...string) (int, error) {
	return commandStat(ctx, c, "calls", names)
}

// RejectedCalls returns how many calls of the commands named the server behind c refused
// before it ran them: an ACL's denial, a wrong number of arguments.
func RejectedCalls(ctx context.Context, c *redis.Client, names ...string) (int, error) {
	return commandStat(ctx, c, "rejected_calls", names)
}

// commandStat sums the field stat of INFO commandstats over the commands named.
func commandStat(ctx context.Context, c *redis.Client, stat string, names []string) (int, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		for _, name := range names {
			fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
			if !ok {
				continue
			}
			for kv := range strings.SplitSeq(fields, ",") {
				if v, ok := strings.CutPrefix(kv, stat+"="); ok {
					k, _ := strconv.Atoi(v)
					n += k
				}
			}
		}
	}
	return n, nil
}

// LockOwner returns the owner of the Redis lock whose key is key on the server behind c, in
// either of its forms (redisbackend's lock.lua): "" when there is no lock.
func LockOwner(ctx context.Context, c *redis.Client, key string) (string, error) {
	v, err := c.Get(ctx, key).Result()
	switch {
	case err == redis.Nil:
		return "", nil
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		owner, err := c.HGet(ctx, key, "owner").Result()
		if err == redis.Nil {
			return "", nil
		}
		return owner, err
	case err != nil:
		return "", err
	}
	// '<token> <hold id> <owner>'
	_, rest, _ := strings.Cut(v, " ")
	_, owner, _ := strings.Cut(rest, " ")
	return owner, nil
}
