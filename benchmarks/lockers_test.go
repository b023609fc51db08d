package benchmarks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/redlockrueidis"
	"github.com/go-redlock/redlock/redlockvalkey"
)

// locker is what every library under comparison is driven through.
type locker interface {
	// Lock takes key for ttl. With wait it waits the way the library does
	// by default until ctx ends; without, it makes the library's default
	// attempt(s) for an uncontended lock. It returns the unlock function.
	Lock(ctx context.Context, key string, ttl time.Duration, wait bool) (func(context.Context) error, error)
}

// redlockLocker is this library, with its defaults and the options of its
// row.
type redlockLocker struct{ rl *redlock.Redlock }

// newRedlock returns the maker of a Redlock with opts.
func newRedlock(opts ...redlock.Option) func([]redis.UniversalClient) locker {
	return func(clients []redis.UniversalClient) locker {
		rl, err := redlock.New(clients, opts...)
		if err != nil {
			panic(err)
		}
		return redlockLocker{rl}
	}
}

// Close closes the Redlock: a cross-process child does before it exits.
func (l redlockLocker) Close() error { return l.rl.Close() }

func (l redlockLocker) Lock(ctx context.Context, key string, ttl time.Duration, wait bool) (func(context.Context) error, error) {
	var opts []redlock.Option
	if wait {
		opts = append(opts, redlock.WithRetryCount(-1))
	}
	lock, err := l.rl.Acquire(ctx, []string{key}, ttl, opts...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := lock.Release(ctx); return err }, nil
}

// redsyncLocker is go-redsync/redsync v4 with its defaults (32 tries,
// 50-250ms apart); when waiting, tries are unlimited.
type redsyncLocker struct{ rs *redsync.Redsync }

func newRedsync(clients []redis.UniversalClient) locker {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = redsyncgoredis.NewPool(c)
	}
	return redsyncLocker{redsync.New(pools...)}
}

func (l redsyncLocker) Lock(ctx context.Context, key string, ttl time.Duration, wait bool) (func(context.Context) error, error) {
	opts := []redsync.Option{redsync.WithExpiry(ttl)}
	if wait {
		opts = append(opts, redsync.WithTries(math.MaxInt32))
	}
	m := l.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}, nil
}

// bsmLocker is bsm/redislock on one node (it has no quorum): the
// single-node reference. When waiting it retries every 100ms.
type bsmLocker struct{ c *redislock.Client }

func newBSM(clients []redis.UniversalClient) locker {
	return bsmLocker{redislock.New(clients[0])}
}

func (l bsmLocker) Lock(ctx context.Context, key string, ttl time.Duration, wait bool) (func(context.Context) error, error) {
	opt := &redislock.Options{}
	if wait {
		opt.RetryStrategy = redislock.LinearBackoff(100 * time.Millisecond)
	}
	lock, err := l.c.Obtain(ctx, key, ttl, opt)
	if err != nil {
		return nil, err
	}
	return lock.Release, nil
}

// floorLocker is the minimal Redlock a plain Go client would write: SET NX
// PX on every node at once, wait for every answer, a quorum wins; release
// with a compare-and-delete script on every node, waiting for every answer.
// When waiting it retries 200ms ± 100ms apart, as node-redlock does.
type floorLocker struct{ clients []redis.UniversalClient }

func newFloor(clients []redis.UniversalClient) locker { return floorLocker{clients} }

var floorRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

func (l floorLocker) fanout(fn func(c redis.UniversalClient) bool) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for _, c := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fn(c) {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return won
}

func (l floorLocker) Lock(ctx context.Context, key string, ttl time.Duration, wait bool) (func(context.Context) error, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	value := hex.EncodeToString(b[:])
	release := func(ctx context.Context) int {
		return l.fanout(func(c redis.UniversalClient) bool {
			n, err := floorRelease.Run(ctx, c, []string{key}, value).Int()
			return err == nil && n == 1
		})
	}
	quorum := len(l.clients)/2 + 1
	for {
		won := l.fanout(func(c redis.UniversalClient) bool {
			ok, err := c.SetNX(ctx, key, value, ttl).Result()
			return err == nil && ok
		})
		if won >= quorum {
			return func(ctx context.Context) error {
				if release(ctx) < quorum {
					return errors.New("floor: release missed a quorum")
				}
				return nil
			}, nil
		}
		release(ctx)
		if !wait {
			return nil, errors.New("floor: no quorum")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100*time.Millisecond + time.Duration(mrand.Int64N(int64(200*time.Millisecond)))):
		}
	}
}

// newRedlockRueidis and newRedlockValkey return the maker of a Redlock
// whose nodes are rueidis's (valkey-go's) clients of the same servers as
// clients, with their defaults: the client adapters' rows.
func newRedlockRueidis(clients []redis.UniversalClient) locker {
	nodes := make([]driver.Node, len(clients))
	var closers []func()
	for i, c := range clients {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.(*redis.Client).Options().Addr}, ForceSingleClient: true})
		if err != nil {
			panic(err)
		}
		nodes[i] = redlockrueidis.Node(rc)
		closers = append(closers, rc.Close)
	}
	rl, err := redlock.NewFromNodes(nodes)
	if err != nil {
		panic(err)
	}
	return adapterLocker{redlockLocker{rl}, closers}
}

func newRedlockValkey(clients []redis.UniversalClient) locker {
	nodes := make([]driver.Node, len(clients))
	var closers []func()
	for i, c := range clients {
		vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{c.(*redis.Client).Options().Addr}, ForceSingleClient: true})
		if err != nil {
			panic(err)
		}
		nodes[i] = redlockvalkey.Node(vc)
		closers = append(closers, vc.Close)
	}
	rl, err := redlock.NewFromNodes(nodes)
	if err != nil {
		panic(err)
	}
	return adapterLocker{redlockLocker{rl}, closers}
}

// adapterLocker is a Redlock over an adapter's clients, which its Close
// closes too.
type adapterLocker struct {
	redlockLocker
	closers []func()
}

func (l adapterLocker) Close() error {
	err := l.rl.Close()
	for _, c := range l.closers {
		c()
	}
	return err
}
