package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// cluster is a Redlock over real redis-server nodes, with a plain client per
// node to look at what the nodes hold.
type cluster struct {
	rl      *redlock.Redlock
	nodes   []*redistest.Node
	clients []*redis.Client // the clients the Redlock uses
	peek    []*redis.Client // separate clients for the test's own reads
}

// fast makes failing calls quick: the tests count attempts, not wait.
var fast = []redlock.Option{redlock.WithRetryDelay(10 * time.Millisecond), redlock.WithRetryJitter(5 * time.Millisecond)}

// newCluster starts n nodes and a Redlock over them.
func newCluster(t testing.TB, n int, opts ...redlock.Option) *cluster {
	t.Helper()
	return newClusterOn(t, redistest.Start(t, n), nil, opts...)
}

// newClusterOn builds a Redlock over nodes, with clientOpts for its clients.
func newClusterOn(t testing.TB, nodes []*redistest.Node, clientOpts *redis.Options, opts ...redlock.Option) *cluster {
	t.Helper()
	c := &cluster{nodes: nodes}
	var ucs []redis.UniversalClient
	for _, nd := range nodes {
		cl := nd.Client(clientOpts)
		c.clients = append(c.clients, cl)
		c.peek = append(c.peek, nd.Client())
		ucs = append(ucs, cl)
	}
	rl, err := redlock.New(ucs, opts...)
	require.NoError(t, err, "New(%d clients)", len(ucs))
	t.Cleanup(func() { _ = rl.Close() }) // before the clients close
	c.rl = rl
	return c
}

// get returns the value of key on node i ("" when missing).
func (c *cluster) get(t *testing.T, i int, key string) string {
	t.Helper()
	v, err := c.peek[i].Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(t, err, "GET %s on node %d", key, i)
	return v
}

// pttl returns the remaining ttl of key on node i.
func (c *cluster) pttl(t *testing.T, i int, key string) time.Duration {
	t.Helper()
	d, err := c.peek[i].PTTL(context.Background(), key).Result()
	require.NoError(t, err, "PTTL %s on node %d", key, i)
	return d
}

// set writes key=value on node i with ttl (0: none).
func (c *cluster) set(t *testing.T, i int, key, value string, ttl time.Duration) {
	t.Helper()
	require.NoError(t, c.peek[i].Set(context.Background(), key, value, ttl).Err(), "SET %s on node %d", key, i)
}

// dbsize returns the number of keys on node i.
func (c *cluster) dbsize(t *testing.T, i int) int64 {
	t.Helper()
	n, err := c.peek[i].DBSize(context.Background()).Result()
	require.NoError(t, err, "DBSIZE on node %d", i)
	return n
}

// within returns a context that ends after d, to bound a call that must not
// hang; the test checks ctx.Err() to tell the bound from the call's own end.
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// gone waits until key is missing on node i. A call returns once a quorum
// has answered, so the other nodes get their delete a moment later.
func (c *cluster) gone(t *testing.T, i int, key string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		n, err := c.peek[i].Exists(context.Background(), key).Result()
		return err == nil && n == 0
	}, 2*time.Second, time.Millisecond, "%s still on node %d", key, i)
}

// hook runs onCmd before every command a client sends, alone or in a
// pipeline, and onPipeline before every pipeline; either may be nil.
type hook struct {
	onCmd      func(redis.Cmder)
	onPipeline func([]redis.Cmder)
}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.onCmd != nil {
			h.onCmd(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.onPipeline != nil {
			h.onPipeline(cmds)
		}
		if h.onCmd != nil {
			for _, c := range cmds {
				h.onCmd(c)
			}
		}
		return next(ctx, cmds)
	}
}

// countingHook counts every command a client sends.
func countingHook(n *atomic.Int32) hook {
	return hook{onCmd: func(redis.Cmder) { n.Add(1) }}
}
