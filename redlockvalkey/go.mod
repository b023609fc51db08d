module github.com/go-redlock/redlock/redlockvalkey

go 1.25.0

require (
	github.com/go-redlock/redlock v0.2.0
	github.com/valkey-io/valkey-go v1.0.79
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.22.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/go-redlock/redlock => ../
