// Package redislayer is the Redis plumbing that redisbackend and redlock share: the client a
// backend is given, lock names and their keys, the error classification, and the scan for
// lock keys. Each of these lives here once, so that the two backends cannot drift apart.
package redislayer
