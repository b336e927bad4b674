package testserver

import (
	"context"
	"fmt"
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

// AllCommandCalls returns, by command (named as CommandCalls names them), how many times the
// server behind c has run each command it ran at all, the calls that scripts made included.
func AllCommandCalls(ctx context.Context, c *redis.Client) (map[string]int, error) {
	return commandStats(ctx, c, "calls")
}

// commandStat sums the field stat of INFO commandstats over the commands named.
func commandStat(ctx context.Context, c *redis.Client, stat string, names []string) (int, error) {
	all, err := commandStats(ctx, c, stat)
	n := 0
	for _, name := range names {
		n += all[name]
	}
	return n, err
}

// commandStats reads the field stat of every command of INFO commandstats; a value that is
// not a number is an error.
func commandStats(ctx context.Context, c *redis.Client, stat string) (map[string]int, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, _ := strings.Cut(strings.TrimSpace(line), ":")
		name, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok || fields == "" {
			continue
		}
		for kv := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(kv, stat+"="); ok {
				k, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				out[name] = k
			}
		}
	}
	return out, nil
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
