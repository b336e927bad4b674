package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
)

var (
	//go:embed set.lua
	setLua string
	//go:embed get.lua
	getLua string

	// The scripts are run with Script.Run: EVALSHA, falling back to EVAL
	// when the server does not have the script cached (NOSCRIPT).
	setScript = redis.NewScript(setLua)
	getScript = redis.NewScript(getLua)
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
	c redis.Scripter
}

// NewRedis returns a guard that runs its scripts on c, typically a
// *redis.Client or *redis.ClusterClient. A nil c gives an error wrapping
// ErrInvalid.
func NewRedis(c redis.Scripter) (*Redis, error) {
	bad := c == nil
	switch v := c.(type) {
	case *redis.Client:
		bad = v == nil
	case *redis.ClusterClient:
		bad = v == nil
	case *redis.Ring:
		bad = v == nil
	}
	if bad {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	return &Redis{c: c}, nil
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
	res, err := setScript.Run(ctx, r.c, []string{key}, value, strconv.FormatInt(token, 10)).Slice()
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
// A missing key returns an error wrapping redis.Nil: test for it with
// errors.Is(err, redis.Nil), not ==. An empty key, a key holding another
// Redis type (WRONGTYPE) or a hash without the value and token fields
// gives an error wrapping ErrInvalid.
func (r *Redis) Get(ctx context.Context, key string) (value string, token int64, err error) {
	if key == "" {
		return "", 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	res, err := getScript.Run(ctx, r.c, []string{key}).Slice()
	if errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("fence: get redis key %q: %w", key, redis.Nil)
	}
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
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("%w: %s redis key %q holds another type: %w", ErrInvalid, op, key, err)
	case redis.HasErrorPrefix(err, "FENCEINVALID"):
		return fmt.Errorf("%w: %s redis key %q: %w", ErrInvalid, op, key, err)
	}
	return fmt.Errorf("fence: %s redis key %q: %w", op, key, err)
}
