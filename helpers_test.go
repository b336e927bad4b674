package fencelock_test

import "sync/atomic"

func addInt32(p *int32, d int32) int32 { return atomic.AddInt32(p, d) }
