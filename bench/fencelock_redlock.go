package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// The adapter for fencelock's Redlock backend: remove this file to benchmark without it.
func init() {
	register(&Entry{
		Library: "fencelock", Setting: "redlock, 5 nodes",
		Waits: true, Nodes: 5,
		Note: "fencelock redlock: package redlock over 5 go-redis clients with ContextTimeoutEnabled, as its documentation asks",
		New: func(addrs []string) (Contender, error) {
			clients := make([]redisbackend.Client, len(addrs))
			closers := make([]func() error, 0, len(addrs)+1)
			for i, a := range addrs {
				rdb := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
				clients[i] = rdb
				closers = append(closers, rdb.Close)
			}
			b := redlock.New(clients)
			closers = append([]func() error{b.Close}, closers...)
			return &fencelockContender{locker: fencelock.New(b), closers: closers}, nil
		},
	})
}
