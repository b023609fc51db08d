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
	goleak.VerifyTestMain(m)
}
