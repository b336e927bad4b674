module github.com/fencelock/fencelock/internal/pgtest

go 1.26.8

require (
	github.com/fencelock/fencelock v0.0.0
	github.com/lib/pq v1.12.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/fencelock/fencelock => ../../
