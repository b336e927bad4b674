// Package redisconn is the narrow, client-agnostic connection to Redis that fencelock's Redis
// backends (redisbackend, redlock) and fence.Redis talk through.
//
// A Conn runs Lua scripts (loading them on NOSCRIPT), batches of them, a script followed by
// WAIT on its own connection, a command on every master, and pub/sub with acknowledgements.
// Replies are plain Go values whatever the client: int64, string, []any, or nil for a nil
// reply; an error reply of the server is a *ServerError.
//
// go-redis v9 clients become a Conn with GoRedis, which the backends call for you: pass them
// any go-redis client as before. Other clients have adapters in modules of their own, so that
// a program pulls only the client it uses:
//
//	github.com/fencelock/fencelock/redisconn/rueidisconn   rueidis
//	github.com/fencelock/fencelock/redisconn/valkeyconn    valkey-go
//
// An adapter is written against this package alone; redisconntest holds the suite it must
// pass.
package redisconn

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Client is what the Redis backends take: a go-redis v9 client (see GoRedisClient) or a
// Conn. Go has no type for "one of these", so Of checks it when a backend is made.
type Client = any

// Conn is one Redis deployment: a single node, a Sentinel-managed master or a Cluster. Its
// methods are safe for concurrent use, and each returns by the end of its context, a dial of a
// new connection included.
type Conn interface {
	// Eval runs s by EVALSHA, and on NOSCRIPT loads it and runs it again. On a Cluster it
	// goes to the node of keys[0].
	Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error)
	// EvalBatch runs every call, in as few round trips as the client can (one pipeline per
	// node), and sets each call's Reply and Err. A call whose script the server lacks is
	// loaded and sent again.
	EvalBatch(ctx context.Context, calls []Call)
	// EvalWait runs s and then WAIT replicas timeout on the same connection, to the master of
	// keys[0], in one round trip, and returns the script's reply and the number of replicas
	// that acknowledged its writes. A WAIT that fails after the script ran returns a
	// *WaitError: the script's writes may stand.
	EvalWait(ctx context.Context, s *Script, keys []string, args []any, replicas int, timeout time.Duration) (reply any, acked int, err error)
	// ForEachMaster calls fn with every master: the one node, or each master of a Cluster,
	// concurrently.
	ForEachMaster(ctx context.Context, fn func(context.Context, Node) error) error
	// Cluster reports whether the deployment is a Redis Cluster.
	Cluster() bool
	// PubSub returns a new subscription connection, sharded (SSUBSCRIBE) or not. It connects
	// on its first Subscribe. After a subscription was lost, its owner opens the next with
	// reroute set, and a Cluster client refreshes its view of the slots; the refresh may come
	// after the first Subscribe, which the old node then refuses (see PubSub).
	PubSub(ctx context.Context, sharded, reroute bool) PubSub
	// String names the deployment for messages: its address or addresses.
	String() string
}

// Node is one server of a deployment.
type Node interface {
	// Do sends one command to the node and returns its reply.
	Do(ctx context.Context, args ...any) (any, error)
}

// PubSub is one subscription connection; its dynamic type is comparable (a pointer). It
// carries the subscriptions over a lost connection by itself, as go-redis does: the next
// connection, whichever call makes it (a Subscribe during the reconnection too), subscribes
// every channel subscribed and not unsubscribed since, and the server acknowledges each again.
// Its owner sends a failed Subscribe again on the same PubSub: after a Cluster slot moved, that
// send reaches the slot's new node, or goes unacknowledged until the owner opens another PubSub.
type PubSub interface {
	// Subscribe sends the subscription of channels; its acknowledgements come to Receive.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe sends the unsubscription of channels; its acknowledgements come to Receive.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Receive calls handle with each message and acknowledgement, in the order they came,
	// until Close; it returns after Close. It is called once, after the first Subscribe.
	Receive(handle func(Event))
	// Close ends the connection and every subscription on it.
	Close() error
}

// Event is a message on a subscribed channel, or the server's acknowledgement of a
// subscription or of its end.
type Event struct {
	Kind    EventKind
	Channel string
	Payload string // of a Message
}

// EventKind tells the events of a PubSub apart.
type EventKind int

const (
	Message      EventKind = iota // a message published on Channel
	Subscribed                    // the server subscribed Channel (again, after a reconnect)
	Unsubscribed                  // the server ended the subscription of Channel
)

// Call is one script call of a batch.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
	Reply  any   // set by EvalBatch
	Err    error // set by EvalBatch
}

// Script is a Lua script and its SHA1, made once.
type Script struct {
	src, hash string
	hashArg   any // hash, boxed once for go-redis's argument lists (see evalSha)
}

// NewScript returns the script with source src.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(h[:])
	return &Script{src: src, hash: hash, hashArg: hash}
}

// Source returns the script's source.
func (s *Script) Source() string { return s.src }

// Hash returns the script's SHA1 in hex, its name for EVALSHA.
func (s *Script) Hash() string { return s.hash }

// ServerError is an error reply of the server, such as "NOSCRIPT No matching script" or
// "READONLY You can't write against a read only replica.". Err, when set, is the client's own
// error for it.
type ServerError struct {
	Msg string
	Err error
}

func (e *ServerError) Error() string { return e.Msg }
func (e *ServerError) Unwrap() error { return e.Err }

// HasPrefix reports whether err is an error reply of the server that starts with prefix.
func HasPrefix(err error, prefix string) bool {
	if se, ok := errors.AsType[*ServerError](err); ok {
		return strings.HasPrefix(se.Msg, prefix)
	}
	return false
}

// WaitError is a WAIT that failed after the script before it ran.
type WaitError struct{ Err error }

func (e *WaitError) Error() string { return "WAIT after the script: " + e.Err.Error() }
func (e *WaitError) Unwrap() error { return e.Err }

// Int64 reads an integer reply.
func Int64(reply any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("redisconn: got the reply %v (%T), want an integer", reply, reply)
	}
	return n, nil
}

// Slice reads an array reply.
func Slice(reply any, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	v, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redisconn: got the reply %v (%T), want an array", reply, reply)
	}
	return v, nil
}

// Int64s reads an array reply of integers.
func Int64s(reply any, err error) ([]int64, error) {
	v, err := Slice(reply, err)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(v))
	for i, e := range v {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("redisconn: got the reply %v, want integers", v)
		}
		out[i] = n
	}
	return out, nil
}
