// Package pgtest holds the tests that need a PostgreSQL server and a driver for it: the
// fence.SQL store's tests against real transactions, and testserver's PostgreSQL queried
// through database/sql. They are a module of their own because the driver, lib/pq, is theirs
// alone: the root module, whose users download what it requires, needs only go-redis.
// testserver starts PostgreSQL without a driver; the tests here bring lib/pq.
package pgtest
