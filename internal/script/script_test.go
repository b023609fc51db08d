package script

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
)

// run runs s as a lane does (EVALSHA, then EVAL when the node lacks it) and
// reads its reply.
func run(t *testing.T, c *redis.Client, s *Script, keys []string, args ...any) (Reply, error) {
	t.Helper()
	ctx := context.Background()
	res, err := c.EvalSha(ctx, s.Hash, keys, args...).Result()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = c.Eval(ctx, s.Src, keys, args...).Result()
	}
	if err != nil {
		return Reply{}, err
	}
	resources := len(keys)
	if s == FencedAcquire || s == WriteBack {
		resources /= 2 // the counters follow the resources
	}
	return s.Read(res, resources)
}

// The scripts' semantics on a real node: all or nothing for acquire and
// extend, our own value never blocks us, a release deletes only our value
// and counts what it deleted, and announces it (the cleanup does not).
func TestScripts(t *testing.T) {
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	keys := []string{"a", "b"}

	r, err := run(t, c, Acquire, keys, "v1", 1000)
	require.NoError(t, err)
	assert.True(t, r.Full())
	assert.InDelta(t, 1000, c.PTTL(ctx, "a").Val().Milliseconds(), 50)
	r, err = run(t, c, Acquire, keys, "v1", 2000)
	require.NoError(t, err)
	assert.True(t, r.Full(), "our own value does not block a retry")
	r, _ = run(t, c, Acquire, keys, "v2", 1000)
	assert.Equal(t, Reply{Applied: 0, Resources: 2}, r, "another value does")
	require.NoError(t, c.Set(ctx, "c", "other", 0).Err())
	r, _ = run(t, c, Acquire, []string{"c", "d"}, "v3", 1000)
	assert.False(t, r.Full())
	assert.Zero(t, c.Exists(ctx, "d").Val(), "all or nothing")

	r, _ = run(t, c, Extend, keys, "v1", 5000)
	assert.True(t, r.Full())
	assert.InDelta(t, 5000, c.PTTL(ctx, "b").Val().Milliseconds(), 50)
	r, _ = run(t, c, Extend, keys, "v2", 5000)
	assert.Equal(t, int64(0), r.Applied)

	sub := c.Subscribe(ctx, ReleasedChannel)
	defer sub.Close()
	_, err = sub.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "b", "thief", 0).Err())
	r, _ = run(t, c, Release, keys, "v1")
	assert.Equal(t, Reply{Applied: 1, Resources: 2}, r, "only the key that held the value")
	assert.Equal(t, "thief", c.Get(ctx, "b").Val())
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v1a", msg.Payload)

	require.NoError(t, c.Set(ctx, "e", "v4", 0).Err())
	r, _ = run(t, c, Cleanup, []string{"e"}, "v4")
	assert.True(t, r.Full())
}

// A fenced acquire answers {applied, highest counter} and writes nothing
// when a counter is not a token; the write-back raises counters only where
// every resource holds the value.
func TestFencedScripts(t *testing.T) {
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	keys := []string{"a", "b", "fa", "fb"}
	require.NoError(t, c.Set(ctx, "fb", "7", 0).Err())
	r, err := run(t, c, FencedAcquire, keys, "v", 1000)
	require.NoError(t, err)
	assert.Equal(t, Reply{Applied: 2, Resources: 2, Counter: 7}, r)
	r, err = run(t, c, WriteBack, keys, "v", "8")
	require.NoError(t, err)
	assert.True(t, r.Full())
	assert.Equal(t, "8", c.Get(ctx, "fa").Val())
	r, _ = run(t, c, WriteBack, keys, "other", "9")
	assert.False(t, r.Full())
	assert.Equal(t, "8", c.Get(ctx, "fb").Val())

	require.NoError(t, c.Set(ctx, "fy", "nope", 0).Err())
	_, err = run(t, c, FencedAcquire, []string{"y", "fy"}, "v", 1000)
	assert.ErrorContains(t, err, "redlock: the fencing counter fy holds nope")
	assert.Zero(t, c.Exists(ctx, "y").Val())
	require.NoError(t, c.Set(ctx, "fy", "9007199254740991", 0).Err())
	_, err = run(t, c, FencedAcquire, []string{"y", "fy"}, "v", 1000)
	assert.ErrorContains(t, err, "fencing tokens exhausted")
}

// Read takes only the answers each script gives.
func TestRead(t *testing.T) {
	r, err := FencedAcquire.Read([]any{int64(2), int64(7)}, 2)
	require.NoError(t, err)
	assert.Equal(t, Reply{Applied: 2, Resources: 2, Counter: 7}, r)
	for _, bad := range []any{int64(2), []any{int64(2)}, []any{int64(2), int64(-1)}, []any{int64(2), int64(MaxToken)}, []any{"2", int64(1)}} {
		var ue *UnexpectedError
		_, err := FencedAcquire.Read(bad, 2)
		assert.ErrorAs(t, err, &ue, "%#v", bad)
	}
	r, err = WriteBack.Read(int64(2), 2)
	require.NoError(t, err)
	assert.True(t, r.Full())
	_, err = Acquire.Read("OK", 1)
	assert.EqualError(t, err, "redlock: unexpected result of type string returned from redis")
	assert.NotEqual(t, Release.Hash, ReleaseSharded.Hash)
}
