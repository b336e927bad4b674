package fence

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/redisconn"
)

var (
	//go:embed set.lua
	setLua string
	//go:embed get.lua
	getLua string

	// The scripts are run with EVALSHA, falling back to EVAL when the
	// server does not have the script cached (NOSCRIPT).
	setScript = redisconn.NewScript(setLua)
	getScript = redisconn.NewScript(getLua)
)

// Redis is a fencing guard for values kept in Redis. Each value lives in
// a hash with two fields, "value" and "token"; Set replaces the value only
// if its token is not older than the stored token, atomically, in a Lua
// script. Keys have no expiry: the stored token must outlive every holder
// that could still write with an older one.
//
// Each operation touches a single key, so Redis works with Redis Cluster.
// A Redis is safe for concurrent use.
type Redis struct {
	c redisconn.Evaler
}

// NewRedis returns a guard that runs its scripts on c: any go-redis v9
// client that runs scripts (*redis.Client, *redis.ClusterClient,
// *redis.Ring, a redis.Scripter) or a redisconn.Conn from an adapter
// (rueidisconn, valkeyconn). A nil c, or one that is neither, gives an
// error wrapping ErrInvalid.
func NewRedis(c redisconn.Client) (*Redis, error) {
	e, err := redisconn.EvalerOf(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Redis{c: e}, nil
}

// Set stores value under key with token if token is not older than the
// token already stored there (equal is accepted), and records token. If
// the stored token is newer, nothing is written and Set returns a
// *StaleError (errors.Is(err, ErrStale)) with Resource = key and Latest =
// the stored token. The comparison is exact for every int64 token.
//
// An empty key or a token <= 0 gives an error wrapping ErrInvalid, and so
// does a key holding another Redis type (the message says WRONGTYPE; the
// Redis error is wrapped too). Other errors come from the connection.
func (r *Redis) Set(ctx context.Context, key, value string, token int64) error {
	if err := validate(key, token); err != nil {
		return err
	}
	res, err := redisconn.Slice(r.c.Eval(ctx, setScript, []string{key}, value, strconv.FormatInt(token, 10)))
	if err != nil {
		return scriptErr("set", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("fence: set redis key %q: unexpected script reply %v", key, res)
	}
	ok, _ := res[0].(int64)
	latestStr, _ := res[1].(string)
	if ok == 1 {
		return nil
	}
	latest, err := strconv.ParseInt(latestStr, 10, 64)
	if err != nil {
		return fmt.Errorf("fence: set redis key %q: bad stored token %q: %w", key, latestStr, err)
	}
	return &StaleError{Resource: key, Token: token, Latest: latest}
}

// Get returns the value and token stored under key by Set.
//
// A missing key returns an error matching ErrNotFound (and redis.Nil):
// test for it with errors.Is(err, fence.ErrNotFound), not ==. An empty key, a key holding another
// Redis type (WRONGTYPE) or a hash without the value and token fields
// gives an error wrapping ErrInvalid.
func (r *Redis) Get(ctx context.Context, key string) (value string, token int64, err error) {
	if key == "" {
		return "", 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	reply, err := r.c.Eval(ctx, getScript, []string{key})
	if reply == nil && err == nil {
		return "", 0, fmt.Errorf("%w: get redis key %q: %w", ErrNotFound, key, redis.Nil)
	}
	res, err := redisconn.Slice(reply, err)
	if err != nil {
		return "", 0, scriptErr("get", key, err)
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("fence: get redis key %q: unexpected script reply %v", key, res)
	}
	value, _ = res[0].(string)
	tokenStr, _ := res[1].(string)
	token, err = strconv.ParseInt(tokenStr, 10, 64)
	if err != nil || token <= 0 {
		return "", 0, fmt.Errorf("%w: get redis key %q: stored token %q is not a positive integer", ErrInvalid, key, tokenStr)
	}
	return value, token, nil
}

// scriptErr classifies an error from a script run.
func scriptErr(op, key string, err error) error {
	switch {
	case redisconn.HasPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("%w: %s redis key %q holds another type: %w", ErrInvalid, op, key, err)
	case redisconn.HasPrefix(err, "FENCEINVALID"):
		return fmt.Errorf("%w: %s redis key %q: %w", ErrInvalid, op, key, err)
	}
	return fmt.Errorf("fence: %s redis key %q: %w", op, key, err)
}
