module github.com/go-redlock/redlock/benchmarks

go 1.26.8

replace github.com/go-redlock/redlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redlock/redlock v0.2.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/valkey-io/valkey-go v1.0.79
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redlock/redlock/redlockrueidis v0.2.0
	github.com/go-redlock/redlock/redlockvalkey v0.2.0
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/go-redlock/redlock/redlockrueidis => ../redlockrueidis

replace github.com/go-redlock/redlock/redlockvalkey => ../redlockvalkey
