package redisconn

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/recent"
)

// GoRedisClient is the part of a go-redis v9 client that GoRedis uses: *redis.Client (a single
// node, or a Sentinel failover client from redis.NewFailoverClient), *redis.ClusterClient,
// redis.UniversalClient, and any wrapper of them satisfy it. A *redis.ClusterClient is run as a
// Cluster; anything else as one node.
type GoRedisClient interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ GoRedisClient = (*redis.Client)(nil)
	_ GoRedisClient = (*redis.ClusterClient)(nil)
	_ GoRedisClient = redis.UniversalClient(nil)
)

// ErrNotAClient is the error of Of for a value that is neither a Conn nor a go-redis client.
var ErrNotAClient = errors.New("not a Redis client: want a go-redis v9 client or a redisconn.Conn")

// Of returns c as a Conn: c itself when it is one, GoRedis(c) when it is a go-redis client.
// A nil c, a nil pointer in c, or any other value is an error.
func Of(c any) (Conn, error) {
	if isNil(c) {
		return nil, errors.New("nil redis client")
	}
	switch c := c.(type) {
	case Conn:
		return c, nil
	case GoRedisClient:
		return GoRedis(c), nil
	}
	return nil, fmt.Errorf("%T is %w", c, ErrNotAClient)
}

// Evaler is the part of a Conn that runs one script.
type Evaler interface {
	Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error)
}

// EvalerOf returns c as an Evaler: a Conn, or any go-redis client that runs scripts
// (redis.Scripter, which *redis.Ring is too). A nil c or any other value is an error.
func EvalerOf(c any) (Evaler, error) {
	if s, ok := c.(redis.Scripter); ok && !isNil(c) {
		if _, full := c.(GoRedisClient); !full {
			return goRedisScripter{s}, nil
		}
	}
	return Of(c)
}

func isNil(c any) bool {
	v := reflect.ValueOf(c)
	return c == nil || (v.Kind() == reflect.Pointer && v.IsNil())
}

// GoRedis returns c as a Conn.
func GoRedis(c GoRedisClient) Conn {
	g := &goRedis{c: c, goRedisScripter: goRedisScripter{c}}
	g.cc, _ = c.(*redis.ClusterClient)
	return g
}

type goRedis struct {
	goRedisScripter
	c  GoRedisClient
	cc *redis.ClusterClient // c, when it is a Cluster client
}

// goRedisScripter runs scripts on any go-redis client.
type goRedisScripter struct{ c redis.Scripter }

func (g goRedisScripter) Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	cmd := evalSha(ctx, g.c, s, keys, args)
	if noScript(cmd.Err()) {
		cmd = g.c.Eval(ctx, s.src, keys, args...)
	}
	return goRedisReply(cmd)
}

// processor is what every go-redis client and pipeline has beside redis.Scripter: running a
// command it is given, through its hooks and, on a Cluster, on the node of its first key.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalSha is c.EvalSha with the script's hash boxed once, not at every call as go-redis's
// EvalSha boxes it: one allocation fewer a script, on the lock's hot path. Only go-redis's own
// clients and pipelines take that way: a type of the caller's that has the methods of one (a
// wrapper that embeds a client and adds to its EvalSha) is called through its EvalSha.
func evalSha(ctx context.Context, c redis.Scripter, s *Script, keys []string, args []any) *redis.Cmd {
	var p processor
	switch c := c.(type) {
	case *redis.Client:
		p = c
	case *redis.ClusterClient:
		p = c
	case *redis.Ring:
		p = c
	case *redis.Pipeline:
		p = c
	default:
		return c.EvalSha(ctx, s.hash, keys, args...)
	}
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.hashArg, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, boxedKeys.Box(k))
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = p.Process(ctx, cmd)
	return cmd
}

// boxedKeys keeps the keys of the commands run lately as their argument lists take them: a
// string boxed into an interface is an allocation, and a lock's keys come back at every
// acquire and release of its name.
var boxedKeys recent.Boxes

// noScript reports whether err is the server's NOSCRIPT. redis.HasErrorPrefix allocates even
// for a nil error, which is most calls.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// goRedisReply returns what cmd got, a nil reply as nil and an error reply as a ServerError.
func goRedisReply(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, goRedisErr(err)
	}
	return v, nil
}

func goRedisErr(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if rerr, ok := err.(redis.Error); ok {
		return &ServerError{Msg: rerr.Error(), Err: err}
	}
	return err
}

func (g *goRedis) EvalBatch(ctx context.Context, calls []Call) {
	if len(calls) == 1 {
		c := &calls[0]
		c.Reply, c.Err = g.Eval(ctx, c.Script, c.Keys, c.Args...)
		return
	}
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, c := range calls {
			cmds[k] = evalSha(ctx, p, c.Script, c.Keys, c.Args)
		}
		return nil
	})
	var again []int
	for k, cmd := range cmds {
		if noScript(cmd.Err()) {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		// A node restarted empty, or SCRIPT FLUSH: EVAL carries the source.
		_, _ = g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range again {
				c := calls[k]
				cmds[k] = p.Eval(ctx, c.Script.src, c.Keys, c.Args...)
			}
			return nil
		})
	}
	for k, cmd := range cmds {
		calls[k].Reply, calls[k].Err = goRedisReply(cmd)
	}
}

func (g *goRedis) EvalWait(ctx context.Context, s *Script, keys []string, args []any, replicas int, timeout time.Duration) (any, int, error) {
	type node interface {
		Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	}
	// On a Cluster the pipeline goes to the key's master directly, past the cluster client,
	// which therefore never sees a MOVED reply: after a failover or a reshard it is told here
	// to reload its slot map, synchronously, and the call goes to the new master.
	master := func() (node, error) {
		if g.cc == nil {
			return g.c, nil
		}
		return g.cc.MasterForKey(ctx, keys[0])
	}
	n, err := master()
	if err != nil {
		return nil, 0, goRedisErr(err)
	}
	withSource, moved := false, false
	for {
		var eval, wait *redis.Cmd
		_, _ = n.Pipelined(ctx, func(p redis.Pipeliner) error {
			if withSource {
				eval = p.Eval(ctx, s.src, keys, args...)
			} else {
				eval = p.EvalSha(ctx, s.hash, keys, args...)
			}
			wait = p.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
			return nil
		})
		if err := eval.Err(); err != nil && !errors.Is(err, redis.Nil) {
			switch {
			case !withSource && noScript(err):
				withSource = true
				continue
			case g.cc != nil && !moved && redis.HasErrorPrefix(err, "MOVED"):
				moved = true
				// ForEachMaster loads the slot map afresh before it returns.
				if err := g.cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
					return nil, 0, goRedisErr(err)
				}
				if n, err = master(); err != nil {
					return nil, 0, goRedisErr(err)
				}
				continue
			}
			return nil, 0, goRedisErr(err)
		}
		acked, err := wait.Int64()
		if err != nil {
			// The script ran and may have written.
			return nil, 0, &WaitError{Err: goRedisErr(err)}
		}
		reply, _ := goRedisReply(eval)
		return reply, int(acked), nil
	}
}

func (g *goRedis) ForEachMaster(ctx context.Context, fn func(context.Context, Node) error) error {
	if g.cc != nil {
		return goRedisErr(g.cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return fn(ctx, goRedisNode{m})
		}))
	}
	return fn(ctx, goRedisPipeNode{g.c})
}

// goRedisNode is a master of a Cluster.
type goRedisNode struct{ c *redis.Client }

func (n goRedisNode) Do(ctx context.Context, args ...any) (any, error) {
	return goRedisReply(n.c.Do(ctx, args...))
}

// goRedisPipeNode is a single node reached through a client that may have no Do of its own (a
// wrapper that has only the methods of GoRedisClient): a pipeline of one command.
type goRedisPipeNode struct{ c GoRedisClient }

func (n goRedisPipeNode) Do(ctx context.Context, args ...any) (any, error) {
	var cmd *redis.Cmd
	_, _ = n.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.Do(ctx, args...)
		return nil
	})
	return goRedisReply(cmd)
}

func (g *goRedis) Cluster() bool { return g.cc != nil }

func (g *goRedis) String() string {
	switch v := g.c.(type) {
	case *redis.Client:
		return v.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(v.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", g.c)
}

func (g *goRedis) PubSub(ctx context.Context, sharded, reroute bool) PubSub {
	if reroute && g.cc != nil {
		// The slot may have moved: the new connection goes where the cluster client believes
		// it is, and the client does not learn of it from pub/sub replies.
		g.cc.ReloadState(ctx)
	}
	// A PubSub made without channels connects on its first subscription, to the node of its
	// first channel's slot. One made with its channels would hide the error.
	if sharded {
		return &goRedisPubSub{ps: g.c.SSubscribe(ctx), sharded: true}
	}
	return &goRedisPubSub{ps: g.c.Subscribe(ctx)}
}

type goRedisPubSub struct {
	ps      *redis.PubSub
	sharded bool
}

func (p *goRedisPubSub) Subscribe(ctx context.Context, channels ...string) error {
	if p.sharded {
		return p.ps.SSubscribe(ctx, channels...)
	}
	return p.ps.Subscribe(ctx, channels...)
}

func (p *goRedisPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	if p.sharded {
		return p.ps.SUnsubscribe(ctx, channels...)
	}
	return p.ps.Unsubscribe(ctx, channels...)
}

func (p *goRedisPubSub) Receive(handle func(Event)) {
	for msg := range p.ps.ChannelWithSubscriptions(redis.WithChannelSize(64)) {
		switch m := msg.(type) {
		case *redis.Message:
			handle(Event{Kind: Message, Channel: m.Channel, Payload: m.Payload})
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				handle(Event{Kind: Subscribed, Channel: m.Channel})
			case "unsubscribe", "sunsubscribe":
				handle(Event{Kind: Unsubscribed, Channel: m.Channel})
			}
		}
	}
}

func (p *goRedisPubSub) Close() error { return p.ps.Close() }
