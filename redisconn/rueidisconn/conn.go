// Package rueidisconn makes a rueidis client a redisconn.Conn, so that fencelock's Redis
// backends and fence.Redis run on it:
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	...
//	locker := fencelock.New(redisbackend.New(rueidisconn.New(client)))
//
// It is a module of its own, so that programs that use go-redis never download it. A
// single node, a Sentinel deployment and a Cluster all work; the Conn never closes the client.
package rueidisconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock/redisconn"
)

// New returns client as a redisconn.Conn.
func New(client rueidis.Client) redisconn.Conn {
	return &conn{c: client, cluster: client.Mode() == rueidis.ClientModeCluster}
}

type conn struct {
	c       rueidis.Client
	cluster bool
}

// strs turns script arguments into the strings rueidis sends.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case []byte:
			out[i] = string(v)
		case int:
			out[i] = strconv.Itoa(v)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case bool:
			out[i] = "0"
			if v {
				out[i] = "1"
			}
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

func (c *conn) evalsha(s *redisconn.Script, keys []string, args []string) rueidis.Completed {
	return c.c.B().Evalsha().Sha1(s.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (c *conn) eval(s *redisconn.Script, keys []string, args []string) rueidis.Completed {
	return c.c.B().Eval().Script(s.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func noScript(r rueidis.RedisResult) bool {
	re, ok := rueidis.IsRedisErr(r.Error())
	return ok && re.IsNoScript()
}

func (c *conn) Eval(ctx context.Context, s *redisconn.Script, keys []string, args ...any) (any, error) {
	a := strs(args)
	r := c.c.Do(ctx, c.evalsha(s, keys, a))
	if noScript(r) {
		r = c.c.Do(ctx, c.eval(s, keys, a))
	}
	return reply(r)
}

func (c *conn) EvalBatch(ctx context.Context, calls []redisconn.Call) {
	args := make([][]string, len(calls))
	cmds := make(rueidis.Commands, len(calls))
	for k, call := range calls {
		args[k] = strs(call.Args)
		cmds[k] = c.evalsha(call.Script, call.Keys, args[k])
	}
	rs := c.c.DoMulti(ctx, cmds...)
	var again []int
	for k, r := range rs {
		if noScript(r) {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		// A node restarted empty, or SCRIPT FLUSH: EVAL carries the source.
		cmds = cmds[:0]
		for _, k := range again {
			cmds = append(cmds, c.eval(calls[k].Script, calls[k].Keys, args[k]))
		}
		for i, r := range c.c.DoMulti(ctx, cmds...) {
			rs[again[i]] = r
		}
	}
	for k, r := range rs {
		calls[k].Reply, calls[k].Err = reply(r)
	}
}

// EvalWait sends the script and WAIT on one connection: WAIT counts the replicas that have the
// writes of its own connection. On a Cluster the connection is the master of keys[0]'s slot;
// after a MOVED reply the client has refreshed its slot map, and the call goes once more on a
// new connection.
func (c *conn) EvalWait(ctx context.Context, s *redisconn.Script, keys []string, args []any, replicas int, timeout time.Duration) (any, int, error) {
	a := strs(args)
	withSource, moved := false, false
	for {
		script := c.evalsha(s, keys, a)
		if withSource {
			script = c.eval(s, keys, a)
		}
		wait := c.c.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
		rs := c.evalWait(ctx, script, wait)
		err := rs[0].Error()
		if err != nil && !rueidis.IsRedisNil(err) {
			re, isRedis := rueidis.IsRedisErr(err)
			switch {
			case !withSource && isRedis && re.IsNoScript():
				withSource = true
				continue
			case c.cluster && !moved && isRedis && strings.HasPrefix(re.Error(), "MOVED"):
				moved = true
				continue
			}
			return nil, 0, convErr(err)
		}
		acked, err := rs[1].AsInt64()
		if err != nil {
			return nil, 0, &redisconn.WaitError{Err: convErr(err)}
		}
		v, _ := reply(rs[0])
		return v, int(acked), nil
	}
}

// evalWait sends script and wait on one connection. A Cluster client's dedicated connection
// connects on its first command, within ctx. A single node's or Sentinel's would connect at
// once, without a context, for as long as the client's Dialer.Timeout (5 s by default) when the
// server does not answer; DoMulti takes the connection within ctx instead, and sends a batch
// with a blocking command (WAIT) whole on one connection of the client's blocking pool.
func (c *conn) evalWait(ctx context.Context, script, wait rueidis.Completed) []rueidis.RedisResult {
	if !c.cluster {
		return c.c.DoMulti(ctx, script, wait)
	}
	dc, release := c.c.Dedicate()
	defer release()
	return dc.DoMulti(ctx, script, wait)
}

// reply returns what r got as redisconn describes it: a nil reply as nil, RESP3 booleans as
// RESP2 has them (true 1, false nil), an error reply as a *redisconn.ServerError.
func reply(r rueidis.RedisResult) (any, error) {
	m, err := r.ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		return nil, convErr(err)
	}
	return value(&m)
}

func value(m *rueidis.RedisMessage) (any, error) {
	if err := m.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		return nil, convErr(err)
	}
	switch {
	case m.IsNil():
		return nil, nil
	case m.IsInt64():
		return m.AsInt64()
	case m.IsString():
		return m.ToString()
	case m.IsBool():
		b, err := m.AsBool()
		if err != nil || !b {
			return nil, err
		}
		return int64(1), nil
	case m.IsArray():
		ms, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(ms))
		for i := range ms {
			v, err := value(&ms[i])
			if err != nil {
				if se, ok := errors.AsType[*redisconn.ServerError](err); ok {
					out[i] = se // an error inside an array is a value there, as go-redis has it
					continue
				}
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return m.ToAny()
}

func convErr(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return &redisconn.ServerError{Msg: re.Error(), Err: err}
	}
	return err
}

func (c *conn) ForEachMaster(ctx context.Context, fn func(context.Context, redisconn.Node) error) error {
	nodes := c.c.Nodes()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(nodes))
	var mu sync.Mutex
	for _, n := range nodes {
		wg.Go(func() {
			nd := node{n}
			err := func() error {
				if c.cluster {
					// Nodes has the replicas of a Cluster too.
					role, err := redisconn.Slice(nd.Do(ctx, "ROLE"))
					if err != nil {
						return err
					}
					if len(role) == 0 || role[0] != "master" {
						return nil
					}
				}
				return fn(ctx, nd)
			}()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// node is one server, as rueidis's Nodes gives it.
type node struct{ c rueidis.Client }

func (n node) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("rueidisconn: a command without a name")
	}
	a := strs(args)
	return reply(n.c.Do(ctx, n.c.B().Arbitrary(a[0]).Args(a[1:]...).Build()))
}

func (c *conn) Cluster() bool { return c.cluster }

func (c *conn) String() string {
	addrs := make([]string, 0, 3)
	for a := range c.c.Nodes() {
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return "rueidis"
	}
	slices.Sort(addrs)
	return strings.Join(addrs, ",")
}
