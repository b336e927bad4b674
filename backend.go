package fencelock

import "github.com/fencelock/fencelock/driver"

// Backend is what a store must provide to hold fencelock locks: packages redisbackend, redlock,
// etcdbackend, zkbackend and memorybackend each make one. Its contract, and the optional
// interfaces that buy more, are package driver's, written for the people who implement one.
type Backend = driver.Backend

// Info describes a lock as its backend sees it (Inspect, List).
type Info = driver.Info

// SemaphoreInfo describes a semaphore as its backend sees it (Semaphore.Inspect,
// ListSemaphores).
type SemaphoreInfo = driver.SemaphoreInfo
