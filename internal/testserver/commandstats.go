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
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				k, _ := strconv.Atoi(calls)
				n += k
			}
		}
	}
	return n, nil
}
