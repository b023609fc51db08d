package redlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's own log lines (dial retries against the nodes the
// tests kill on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain fails the package if any goroutine outlives the tests: every
// goroutine redlock starts must have an owner and end.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m, goIgnoreRedial)
}

// goIgnoreRedial ignores go-redis's own redial probe: once a pool has failed
// to dial PoolSize times (the tests kill and refuse nodes on purpose), it
// starts a goroutine that redials every second and returns within a second
// of the client's Close. It is not ours to end.
var goIgnoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
